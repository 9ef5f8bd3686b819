// Model shape: a decoder-only transformer in one of two families.
//   gpt2:  LayerNorm, learned positions, GELU MLP (4x), biases, tied embeddings.
//   llama: RMSNorm, RoPE, SwiGLU MLP, no biases, untied output, grouped K/V heads.
// (Tied or untied is a default of the family, set by set_arch() and the presets; either
// family may override it.)
// Either may add QK-norm (RMSNorm over each head's query and key vectors).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ndt {

enum class Arch { gpt2, llama };
std::string_view arch_name(Arch arch);
Arch arch_from_name(std::string_view name);  // throws naming the value

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
  float init_std = 0.02f;  // residual projections use init_std / sqrt(2 n_layer)

  int head_dim() const { return d_model / n_head; }
  int kv_heads() const { return arch == Arch::gpt2 ? n_head : n_kv_head; }
  bool has_bias() const { return arch == Arch::gpt2; }

  // Sets the family and its defaults for the keys the families differ in by default
  // (tied_embeddings: gpt2 tied, llama untied); a config sets explicit keys after it.
  void set_arch(Arch family);

  // Throws ndt::Error naming the first invalid field and its value.
  void validate() const;

  // Named presets: gpt2-124m, gpt2-350m, llama-small, llama-tiny, gpt2-tiny.
  static ModelConfig preset(std::string_view name);
  static std::vector<std::string> preset_names();
};

}  // namespace ndt
