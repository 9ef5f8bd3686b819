// One transformer block with explicit forward and backward:
//   x_mid = x + Wo · attention(norm1(x))        (q, k, v projections; QK-norm; RoPE)
//   x_out = x_mid + MLP(norm2(x_mid))           (GELU 4x for gpt2, SwiGLU for llama)
// BlockActivations is the block's ctx: what forward saves for backward.
#pragma once

#include "model/config.h"
#include "model/parameter.h"

#include <string>
#include <vector>

namespace ndt {

class ModelHooks;

// Activations one block saves, for B*T rows (views into one arena).
struct BlockActivations {
  float* ln1 = nullptr;       // [N, C] norm1 output
  float* ln1_mean = nullptr;  // [N] (LayerNorm only)
  float* ln1_rstd = nullptr;  // [N]
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
  float* x_mid = nullptr;     // [N, C]
  float* ln2 = nullptr;       // [N, C]
  float* ln2_mean = nullptr;  // [N]
  float* ln2_rstd = nullptr;  // [N]
  float* ff_pre = nullptr;    // [N, F] fc output (gpt2) or gate (llama)
  float* ff_up = nullptr;     // [N, F] up projection (llama only)
  float* ff_act = nullptr;    // [N, F] activation output
};

// Gradient scratch shared by all blocks during backward.
struct BlockScratch {
  float* dln = nullptr;       // [N, C]
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

// Floats each structure needs for B*T rows (used to lay out arenas and to predict memory).
int64_t block_activation_floats(const ModelConfig& c, int B, int T);
int64_t block_scratch_floats(const ModelConfig& c, int B, int T);
BlockActivations carve_block_activations(const ModelConfig& c, int B, int T, float* base);
BlockScratch carve_block_scratch(const ModelConfig& c, int B, int T, float* base);

// Parameter specs of block `layer`, in a fixed order.
std::vector<ParameterSpec> block_parameter_specs(const ModelConfig& c, int layer);

// Forward/backward of the norm the architecture uses (LayerNorm with bias for gpt2,
// RMSNorm for llama); bias and mean are ignored for RMSNorm.
void norm_forward(const ModelConfig& c, float* out, float* mean, float* rstd, const float* inp,
                  const Parameter& weight, const Parameter* bias, int N);
void norm_backward(const ModelConfig& c, float* dinp, const Parameter& weight,
                   const Parameter* bias, const float* dout, const float* inp, const float* mean,
                   const float* rstd, int N);

class Block {
 public:
  Block(const ModelConfig& config, int layer, ParameterStore& store);

  // x_out[N, C] = block(x_in); saves what backward needs in acts.
  void forward(const float* x_in, float* x_out, BlockActivations& acts, int B, int T) const;

  // In: dres = dL/dx_out. Out: dres = dL/dx_in. Parameter gradients are added (+=).
  // hooks->poll() (if given) is called between kernels.
  void backward(float* dres, const float* x_in, const BlockActivations& acts, BlockScratch& s,
                int B, int T, ModelHooks* hooks = nullptr) const;

  // Offset of this block's first parameter in the arenas (its parameters are contiguous).
  int64_t first_arena_offset() const { return ln1_w_->arena_offset; }

 private:
  const Parameter* find(ParameterStore& store, const std::string& suffix, bool required = true);
  const ModelConfig& c_;
  std::string prefix_;
  const Parameter *ln1_w_, *ln1_b_, *ln2_w_, *ln2_b_;
  const Parameter *wq_, *bq_, *wk_, *bk_, *wv_, *bv_, *wo_, *bo_;
  const Parameter *q_norm_, *k_norm_;
  const Parameter *fc_, *fc_b_, *up_, *proj_, *proj_b_;  // fc = gate for llama, proj = down
};

}  // namespace ndt
