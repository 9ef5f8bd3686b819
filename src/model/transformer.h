// The decoder-only transformer: token (and, for gpt2, position) embedding, n_layer
// blocks, a final norm and the output layer fused with the cross-entropy loss.
// The output layer is streamed over chunks of rows: each chunk's logits are
// computed, turned into loss and gradient in place, and back-propagated at once, so
// at most chunk x vocab logits are held.
#pragma once

#include "core/tensor.h"
#include "model/block.h"
#include "model/config.h"
#include "model/parameter.h"
#include "parallel/tensor_parallel.h"

#include <cstdint>
#include <vector>

namespace ndt {

// Hooks the model calls while it runs, so a parallel layout can act at the right
// moment: gather a unit's parameters before it computes, release them after, start
// communicating gradients as soon as they are final. A unit is the root (kRootUnit:
// embeddings, final norm, output layer; in use from the start of forward to the end of
// backward or of a forward-only pass) or one block (0 .. n_layer - 1).
class ModelHooks {
 public:
  static constexpr int kRootUnit = -1;
  virtual ~ModelHooks() = default;
  virtual void before_forward(int unit) {}
  // For a block: its forward is done. For the root: a forward-only pass is done.
  virtual void after_forward(int unit) {}
  // The root's comes first (before the output layer's backward), then the blocks'.
  virtual void before_backward(int unit) {}
  // A block's backward is done: its gradients are final. The root's comes last.
  virtual void after_backward(int unit) {}
  // The gradients at gradient-arena offsets >= arena_offset are final for this backward
  // (backward runs in reverse order of the arena, so "final" grows from the end).
  virtual void grads_ready_from(int64_t arena_offset) {}
  // Called between the kernels of backward: a chance to progress communication.
  virtual void poll() {}
};

class Transformer {
 public:
  // materialize_parameters = false: no parameter or gradient memory (see ParameterStore).
  // tp: the tensor-parallel group (parallel/tensor_parallel.h); every rank of it runs
  // the model on the same tokens, each holding its part of every layer.
  Transformer(const ModelConfig& config, uint64_t seed, int loss_chunk_rows = 256,
              bool materialize_parameters = true, const TensorParallel& tp = {});
  const TensorParallel& tensor_parallel() const { return tp_; }

  const ModelConfig& config() const { return config_; }
  ParameterStore& store() { return store_; }
  const ParameterStore& store() const { return store_; }

  // Forward, loss and backward on a microbatch of B rows of T tokens. Parameter
  // gradients are added (+=) as the gradient of grad_scale * (sum of token losses);
  // returns the mean token loss.
  double forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                          float grad_scale);

  // Hooks called from then on (nullptr: none). Not owned.
  void set_hooks(ModelHooks* hooks) { hooks_ = hooks; }

  // Mean token loss without gradients.
  double evaluate(const int32_t* inputs, const int32_t* targets, int B, int T);

  // Logits [vocab] of the next token after tokens[0..T) (one sequence).
  void next_token_logits(const int32_t* tokens, int T, float* logits);

  // Training FLOPs per token of the whole model (all tp ranks together): 6 x (parameters
  // used in matmuls) + 12 x n_layer x d_model x T (attention scores and weighted sum,
  // forward and backward, counted in full).
  double flops_per_token(int T) const;
  // Parameters in matmuls (logical, whole model): all except lookup-only tables
  // (positions; untied input embedding).
  int64_t matmul_params() const;

  // Activation memory per rank (ledger tag activations) for micro-batches of B x T, from
  // the shapes alone: saved activations, backward scratch and one logits chunk. (Model
  // states: parallel/memory_model.h.)
  static int64_t predict_activation_bytes(const ModelConfig& config, int B, int T, int loss_chunk_rows,
                                          const TpLayout& tp = {});
  // Of those, the bytes of the local rows: the residual stream, the norms' statistics and
  // the residual adds, which sequence parallel splits by tp.
  static int64_t predict_local_row_activation_bytes(const ModelConfig& config, int B, int T, const TpLayout& tp = {});

 private:
  void ensure_workspace(int B, int T);
  void forward(const int32_t* inputs, int B, int T);
  // Streams the output layer over row chunks; returns the summed token loss.
  double head_loss(const int32_t* targets, int N, float grad_scale, bool backward);
  const Parameter& head_weight() const;

  ModelConfig config_;
  TensorParallel tp_;
  ParameterStore store_;
  ModelHooks* hooks_ = nullptr;
  std::vector<Block> blocks_;
  int loss_chunk_rows_;
  const Parameter* wte_;
  const Parameter* wpe_ = nullptr;
  const Parameter* lnf_w_;
  const Parameter* lnf_b_ = nullptr;
  const Parameter* lm_head_ = nullptr;
  // Gradients of the root's replicated parameters that are partial under sequence
  // parallel: the final norm (finished before the blocks' backward) and the positions.
  PartialGradients final_norm_partial_, positions_partial_;

  // Workspace sized for the largest (B, T) seen; views below point into it.
  int64_t capacity_rows_ = 0, capacity_att_ = 0;
  Tensor acts_arena_, scratch_arena_;
  std::vector<BlockActivations> acts_;
  BlockScratch scratch_;
  // Rows: N = B x T; local rows Nl (N / tp under sequence parallel, else N).
  std::vector<float*> residual_;  // L + 1 pointers into the residual stream [Nl, C]
  float *lnf_ = nullptr;          // [N, C] final norm output, all rows (the output layer's input)
  float *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr;  // [Nl]
  float *dres_ = nullptr;         // [Nl, C]
  float *dlnf_ = nullptr;         // [N, C]
  float *logits_ = nullptr;       // [chunk, V / tp]
  float *loss_work_ = nullptr;    // [3 x chunk] (vocab-parallel loss)
  float *losses_ = nullptr;       // [N]
  std::vector<int32_t> positions_;
};

// Parameter specs of the whole model in order (embeddings, blocks, final norm, head).
std::vector<ParameterSpec> model_parameter_specs(const ModelConfig& config);
int64_t count_parameters(const ModelConfig& config);

}  // namespace ndt
