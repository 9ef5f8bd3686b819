// Model shape: a decoder-only transformer in one of two families.
//   gpt2:  LayerNorm, learned positions, GELU MLP (4x), biases, tied embeddings.
//   llama: RMSNorm, RoPE, SwiGLU MLP, no biases, untied output, grouped K/V heads.
// (Tied or untied is a default of the family, set by set_arch() and the presets; either
// family may override it.)
// A llama model may add biases on its q, k and v projections (Qwen2) and scale its RoPE
// frequencies as Llama 3 does (rope_scaling).
// Either may add QK-norm (RMSNorm over each head's query and key vectors), and either
// may replace the MLP of every moe_every-th block by a mixture of experts (model/moe.h):
// a router choosing moe_top_k of n_experts experts per token (each an MLP of the
// family's kind, SwiGLU or GELU, width moe_d_ff, without biases), plus optionally a
// shared MLP of width moe_shared_d_ff that every token passes through.
#pragma once

#include "model/lora_config.h"
#include "kernels/rope_frequencies.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ndt {

enum class Arch { gpt2, llama };
std::string_view arch_name(Arch arch);
Arch arch_from_name(std::string_view name);  // throws naming the value

// How the router turns its logits into expert scores: softmax over the experts
// (Mixtral, Switch), or an independent sigmoid per expert (DeepSeek-V3).
enum class MoeScore { softmax, sigmoid };
std::string_view moe_score_name(MoeScore score);
MoeScore moe_score_from_name(std::string_view name);  // throws naming the value

// RoPE frequency scaling: none, or Llama 3's remapping of the low frequencies
// (kernels/rope_frequencies.h), with its four parameters.
enum class RopeScaling { none, llama3 };
std::string_view rope_scaling_name(RopeScaling scaling);
RopeScaling rope_scaling_from_name(std::string_view name);  // throws naming the value

// Bounds ModelConfig::validate keeps every model within, so that the counts derived from
// its fields (parameters, bytes, FLOPs) cannot overflow: 2^50 parameters (about 1.1e15,
// 500 times the largest models trained) and 65536 blocks.
inline constexpr double kMaxParameters = 1125899906842624.0;  // 2^50
inline constexpr int kMaxLayers = 65536;

struct ModelConfig {
  Arch arch = Arch::gpt2;
  int vocab_size = 256;
  int max_seq_len = 256;
  int n_layer = 2;
  int n_head = 4;
  int n_kv_head = 4;   // llama only; gpt2 uses n_head
  int d_model = 64;
  int d_ff = 256;      // hidden width of the MLP
  bool qk_norm = false;
  bool tied_embeddings = true;
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  bool qkv_bias = false;  // llama: biases on the q, k, v projections (Qwen2); gpt2 has all biases
  RopeScaling rope_scaling = RopeScaling::none;  // llama
  float rope_scaling_factor = 8.0f;
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  int rope_original_max_seq_len = 8192;
  float init_std = 0.02f;  // residual projections use init_std / sqrt(2 n_layer)
  // Fine-tuning: train.freeze's patterns (model/freeze.h); the parameters they match are
  // frozen (ParameterSpec::frozen). Not part of the model's description: the same
  // weights, trained differently.
  std::vector<std::string> freeze;

  // Mixture of experts (n_experts = 0: every block dense). Block l is an MoE block when
  // (l + 1) % moe_every == 0.
  int n_experts = 0;
  int moe_top_k = 2;
  int moe_every = 1;
  int moe_d_ff = 0;         // each routed expert's hidden width (0: d_ff)
  int moe_shared_d_ff = 0;  // the MoE blocks' shared MLP width (0: none)
  MoeScore moe_score = MoeScore::softmax;
  bool moe_normalize_top_k = true;  // the chosen experts' weights divided by their sum
  // Tokens per expert and sequence at most ceil(factor x T x top_k / n_experts); 0: dropless.
  float moe_capacity_factor = 0.0f;
  float moe_aux_loss = 0.01f;  // load-balancing loss coefficient (Switch form, per sequence)
  float moe_z_loss = 0.0f;     // router z-loss coefficient (ST-MoE)

  // Low-rank adapters (model/lora_config.h); targets empty: none. With LoRA every other
  // parameter is frozen.
  LoraConfig lora;

  int head_dim() const { return d_model / n_head; }
  int kv_heads() const { return arch == Arch::gpt2 ? n_head : n_kv_head; }
  bool has_bias() const { return arch == Arch::gpt2; }
  bool has_qkv_bias() const { return has_bias() || (arch == Arch::llama && qkv_bias); }
  bool is_moe() const { return n_experts > 0; }
  bool is_moe_block(int layer) const { return n_experts > 0 && (layer + 1) % moe_every == 0; }
  int expert_d_ff() const { return moe_d_ff > 0 ? moe_d_ff : d_ff; }
  // Whether some block keeps the dense MLP of width d_ff (a dense model, or moe_every > 1).
  bool has_dense_block() const { return n_experts == 0 || moe_every > 1; }
  // The dense MLP width of block `layer`: d_ff, or in an MoE block the shared MLP's (0: none).
  int mlp_d_ff(int layer) const { return is_moe_block(layer) ? moe_shared_d_ff : d_ff; }

  // RoPE's base and scaling as the kernels take them.
  RopeFrequencies rope_frequencies() const;

  // Sets the family and its defaults for the keys the families differ in by default
  // (tied_embeddings: gpt2 tied, llama untied); a config sets explicit keys after it.
  void set_arch(Arch family);

  // Throws ndt::Error naming the first invalid field and its value (and the fields of a
  // model beyond kMaxParameters or kMaxLayers).
  void validate() const;

  // Named presets: gpt2-124m, gpt2-350m, llama-small, llama-tiny, gpt2-tiny, and the MoE
  // gpt2-moe-tiny, llama-moe-tiny (8 experts of half width, top-2), and the Llama 3
  // shapes llama3-8b, llama3-70b, llama3-405b for `ndtrain plan`.
  static ModelConfig preset(std::string_view name);
  static std::vector<std::string> preset_names();
};

// The checks of lora.* against the model's linear layers (model/lora_config.h:
// validate_lora); part of ModelConfig::validate.
void validate_lora_targets(const ModelConfig& c);

}  // namespace ndt
