// A mixture-of-experts MLP (docs/moe.md): the routed part of an MoE block (model/block.h;
// the block adds the optional shared MLP and the residual), with explicit forward and
// backward and no communication of its own: rows travel to their experts through the
// model's ExpertDispatch (model/expert_dispatch.h), per-sequence statistics are summed
// over context-parallel ranks through the attention seam, and under tensor parallelism
// each rank holds its slice of every expert's hidden units, so the output is a partial
// sum that the block's row-parallel reduction completes.
//
// Forward on rows x [N, C] (N = B sequences x T local tokens):
//   router:   logits = x Wr^T [N, E]; scores = softmax(logits), or sigmoid(logits)
//   top-k:    each token's k highest scores (ties: the lower expert), weights = those
//             scores, divided by their sum when moe_normalize_top_k
//   capacity: with moe_capacity_factor > 0, expert e takes at most
//             ceil(factor x T x k / E) tokens of each sequence; assignments are admitted
//             in position order (token by token, a token's slots best first) and the
//             rest dropped (their slot adds nothing; the residual carries the token)
//   experts:  the kept rows grouped by expert, one GEMM per expert and layer:
//             llama down(silu(gate x) * up x), gpt2 proj(gelu(fc x)), no biases; in
//             the compute dtype (model/expert_matmul.h), the rest in fp32
//   combine:  out[t] += sum over kept slots of weight x expert output.
// With a low compute dtype (bf16, f16) the router reads x rounded to it, as the block's
// backward reads x (the norm output it keeps in that dtype): logits, scores, top-k and
// losses stay fp32 on the same values in forward and backward. The kept activations
// below stay fp32; the experts' GEMMs read their operands rounded.
// Losses (in the context's sums, like the token losses: divided by the global token
// count they are means):
//   load balancing (Switch form, per sequence, DeepSeek-V3's sequence-wise variant):
//     aux_s = E x sum_e f_se x P_se, f_se = (tokens of sequence s choosing e) / (T k),
//     P_se = mean over the sequence's tokens of the normalised scores (softmax: the
//     probabilities; sigmoid: scores / their sum); the objective adds moe_aux_loss x the
//     mean of aux_s over the batch's sequences. A sequence is the one group of tokens
//     every layout sees whole (data parallel ranks and micro-batches split batches by
//     sequences), so the loss, its gradient and the capacity drops are the same on
//     every layout; under cp the statistics are summed over the cp ranks first.
//   router z-loss (ST-MoE): moe_z_loss x logsumexp(logits)^2 per token.
#pragma once

#include "core/tensor.h"
#include "model/config.h"
#include "model/expert_dispatch.h"
#include "model/parameter.h"
#include "model/precision.h"

#include <cstdint>
#include <vector>

namespace ndt {

class ContextParallelAttention;

// What one MoE block's forward keeps for its backward, per micro-batch in flight (sizes
// follow the routing; ledger tag activations).
struct MoeActivations {
  Tensor logits;                 // [N, E]
  std::vector<int32_t> expert;   // [N, k] chosen experts, best first
  std::vector<float> weight;     // [N, k] combine weights
  std::vector<int64_t> row;      // [N, k] token-side row of a kept slot, -1: dropped
  std::vector<float> frac;       // [B, E] f_se of each sequence (over the whole sequence)
  ExpertRoute route;
  Tensor inputs;                 // [expert rows, C] expert-side inputs
  Tensor hidden;                 // [expert rows, F] fc / gate output
  Tensor up;                     // [expert rows, F] up projection (llama)
  Tensor act;                    // [expert rows, F] activation output
  Tensor outputs;                // [token rows, C] token-side expert outputs (partial under tp)
};

// Routing counts of the forward passes since the last reset (this rank's tokens).
struct MoeStats {
  std::vector<int64_t> tokens_per_expert;  // kept assignments per global expert, summed over MoE blocks
  int64_t assignments = 0;                  // token x slot choices, kept or dropped
  int64_t dropped = 0;
  // Expert-side rows summed over blocks and micro-batches: this rank's, and its ep
  // group's most loaded rank's (ExpertRoute::most_loaded_rows). Their ratio over the
  // ranks is how much longer the experts take than under balanced routing.
  int64_t expert_rows = 0, most_loaded_rows = 0;
  void add(const MoeStats& other);
};

// What training forwards of MoE blocks add up (Transformer::take_moe_totals): the loss
// terms in token-loss units (divided by the tokens, means) and the routing.
struct MoeTotals {
  double aux_sum = 0, z_sum = 0;
  MoeStats stats;
};

struct MoeBatch {
  int B = 0, T = 0;   // sequences and this rank's tokens of each (T x cp: the whole sequence)
  int cp = 1;
  float grad_scale = 0;
  // This rank adds the loss terms' gradients (tensor parallel rank 0: the others' router
  // gradients are partial sums completed by the region's reduction).
  bool adds_loss_gradients = true;
};

class MoeLayer {
 public:
  MoeLayer() = default;
  // router [E, C]; gate (gpt2: fc) [E, F, C]; up [E, F, C] (llama only, else null);
  // down (gpt2: proj) [E, C, F]; this rank's blocks of them (E / ep experts, F / tp).
  MoeLayer(const ModelConfig& config, const Parameter* router, const Parameter* gate, const Parameter* up,
           const Parameter* down);
  bool active() const { return router_ != nullptr; }
  // compute: the dtype of the experts' GEMMs (the precision policy's compute dtype).
  void bind(const ExpertDispatch& dispatch, const ContextParallelAttention& cp, DType compute) {
    dispatch_ = &dispatch, cp_ = &cp, compute_ = compute;
  }

  // out [N, C] += the routed experts' output for x [N, C]. Adds the loss terms to
  // *aux_sum and *z_sum and the routing to *stats (all may be null: a recompute adds
  // nothing).
  void forward(MoeActivations& a, const MoeBatch& batch, const float* x, float* out, double* aux_sum, double* z_sum,
               MoeStats* stats) const;
  // dout [N, C] (all rows): dx [N, C] += the input gradient; the experts' gradients +=,
  // the router's into drouter (the block's partial-gradient buffer under tp).
  void backward(MoeActivations& a, const MoeBatch& batch, const float* x, const float* dout, float* drouter,
                float* dx) const;
  const Parameter* router() const { return router_; }

 private:
  void route(MoeActivations& a, const MoeBatch& batch, const float* x, double* aux_sum, double* z_sum,
             MoeStats* stats) const;
  void experts_forward(MoeActivations& a) const;
  // The experts' output gradient doutputs [expert rows, C] -> their input gradient
  // dinputs (+=), the expert weights' gradients +=.
  void experts_backward(MoeActivations& a, const float* doutputs, float* dinputs) const;
  void router_backward(MoeActivations& a, const MoeBatch& batch, const float* x, const float* dweight, float* drouter,
                       float* dx) const;

  const ModelConfig* c_ = nullptr;
  const Parameter *router_ = nullptr, *gate_ = nullptr, *up_ = nullptr, *down_ = nullptr;
  const ExpertDispatch* dispatch_ = nullptr;
  const ContextParallelAttention* cp_ = nullptr;
  DType compute_ = DType::f32;
};

// Parameter specs of block `layer`'s routed experts (appended to the block's).
void append_moe_parameter_specs(std::vector<ParameterSpec>& specs, const ModelConfig& c, int layer);

// Assignments expert takes of each sequence of seq_len tokens:
// ceil(moe_capacity_factor x seq_len x moe_top_k / n_experts), computed in double and
// capped at seq_len (a token chooses an expert at most once, so seq_len never drops a
// token; a factor large enough to mean "never drop" cannot overflow into dropping all);
// dropless (factor 0): seq_len.
int64_t moe_expert_capacity(const ModelConfig& c, int64_t seq_len);

// Throws for a precision an MoE model does not compute in (fp8), naming the settings.
void check_moe_precision(const ModelConfig& c, const Precision& precision);

// Expert parameters of one MoE block a token does not use: those of all but top_k
// experts (what the active-parameter count leaves out).
int64_t moe_idle_expert_params(const ModelConfig& c);

}  // namespace ndt
