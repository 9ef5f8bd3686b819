// One transformer block with explicit forward and backward:
//   x_mid = x + Wo · attention(norm1(x))        (q, k, v projections; QK-norm; RoPE)
//   x_out = x_mid + MLP(norm2(x_mid))           (GELU 4x for gpt2, SwiGLU for llama)
// BlockActivations is the block's ctx: what forward saves for backward.
// Under tensor parallelism (parallel/tensor_parallel.h) each rank computes its own heads
// and MLP hidden units; with sequence parallel the residual stream, the norms and the
// residual adds hold rows / tp rows (the "local rows") and the regions all rows.
#pragma once

#include "model/config.h"
#include "model/parameter.h"
#include "parallel/tensor_parallel.h"

#include <string>
#include <vector>

namespace ndt {

class ModelHooks;

// Activations one block saves, for N = B*T rows (views into one arena); Nl = local rows
// (N / tp under sequence parallel, else N); widths NH, NKV, F are this rank's (/ tp).
struct BlockActivations {
  float* ln1 = nullptr;       // [N, C] norm1 output, all rows (the q/k/v input)
  float* ln1_mean = nullptr;  // [Nl] (LayerNorm only)
  float* ln1_rstd = nullptr;  // [Nl]
  float* q_pre = nullptr;     // [N, NH*HS] before QK-norm (qk_norm only)
  float* k_pre = nullptr;     // [N, NKV*HS]
  float* q_rstd = nullptr;    // [N*NH]
  float* k_rstd = nullptr;    // [N*NKV]
  float* q = nullptr;         // [N, NH*HS] as fed to attention (after QK-norm, RoPE)
  float* k = nullptr;         // [N, NKV*HS]
  float* v = nullptr;         // [N, NKV*HS]
  float* att = nullptr;       // [B, NH, T, T] probabilities
  float* lse = nullptr;       // [B, NH, T]
  float* att_out = nullptr;   // [N, NH*HS]
  float* x_mid = nullptr;     // [Nl, C]
  float* ln2 = nullptr;       // [N, C] all rows (the MLP input)
  float* ln2_mean = nullptr;  // [Nl]
  float* ln2_rstd = nullptr;  // [Nl]
  float* ff_pre = nullptr;    // [N, F] fc output (gpt2) or gate (llama)
  float* ff_up = nullptr;     // [N, F] up projection (llama only)
  float* ff_act = nullptr;    // [N, F] activation output
};

// Scratch shared by all blocks (backward; forward uses dln and dln_local as temporaries).
struct BlockScratch {
  float* dln = nullptr;       // [N, C] region input gradient; in forward, a row-parallel partial sum
  float* dln_local = nullptr; // [Nl, C] sequence parallel only: reduce-scattered dln; in forward, a norm output
  float* dout_full = nullptr; // [N, C] sequence parallel only: an all-gathered output gradient
  float* dq = nullptr;        // [N, NH*HS]
  float* dq2 = nullptr;       // [N, NH*HS]
  float* dk = nullptr;        // [N, NKV*HS]
  float* dk2 = nullptr;       // [N, NKV*HS]
  float* dv = nullptr;        // [N, NKV*HS]
  float* datt_out = nullptr;  // [N, NH*HS]
  float* dff_a = nullptr;     // [N, F]
  float* dff_b = nullptr;     // [N, F]
  float* dff_c = nullptr;     // [N, F] (llama only)
};

// Floats each structure needs for B*T rows on one rank (used to lay out arenas and to
// predict memory), and views carved from `base`.
int64_t block_activation_floats(const ModelConfig& c, const TpLayout& tp, int B, int T);
int64_t block_scratch_floats(const ModelConfig& c, const TpLayout& tp, int B, int T);
// Of block_activation_floats, those of the local rows (split by sequence parallel).
int64_t block_local_row_floats(const ModelConfig& c, const TpLayout& tp, int B, int T);
BlockActivations carve_block_activations(const ModelConfig& c, const TpLayout& tp, int B, int T, float* base);
BlockScratch carve_block_scratch(const ModelConfig& c, const TpLayout& tp, int B, int T, float* base);

// Parameter specs of block `layer`, in a fixed order.
std::vector<ParameterSpec> block_parameter_specs(const ModelConfig& c, int layer);

// Forward/backward of the norm the architecture uses (LayerNorm with bias for gpt2,
// RMSNorm for llama); bias and mean are ignored for RMSNorm. Backward adds the weight and
// bias gradients into dweight and dbias.
void norm_forward(const ModelConfig& c, float* out, float* mean, float* rstd, const float* inp,
                  const Parameter& weight, const Parameter* bias, int64_t N);
void norm_backward(const ModelConfig& c, float* dinp, float* dweight, float* dbias, const Parameter& weight,
                   const float* dout, const float* inp, const float* mean, const float* rstd, int64_t N);

class Block {
 public:
  Block(const ModelConfig& config, int layer, ParameterStore& store, const TensorParallel& tp = {});

  // x_out[Nl, C] = block(x_in[Nl, C]); saves what backward needs in acts.
  void forward(const float* x_in, float* x_out, BlockActivations& acts, BlockScratch& s, int B, int T) const;

  // In: dres = dL/dx_out. Out: dres = dL/dx_in. Parameter gradients are added (+=).
  // hooks->poll() (if given) is called between kernels.
  void backward(float* dres, const float* x_in, const BlockActivations& acts, BlockScratch& s,
                int B, int T, ModelHooks* hooks = nullptr);

  // Offset of this block's first parameter in the arenas (its parameters are contiguous).
  int64_t first_arena_offset() const { return ln1_w_->arena_offset; }

 private:
  const Parameter* find(ParameterStore& store, const std::string& suffix, bool required = true);
  const ModelConfig& c_;
  TensorParallel tp_;
  std::string prefix_;
  const Parameter *ln1_w_, *ln1_b_, *ln2_w_, *ln2_b_;
  ColumnParallelLinear wq_, wk_, wv_, fc_, up_;  // fc = gate for llama
  RowParallelLinear wo_, proj_;                  // proj = down for llama
  const Parameter *q_norm_, *k_norm_;
  PartialGradients partial_;
};

}  // namespace ndt
