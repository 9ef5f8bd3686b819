#include "model/config.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>

#include <fmt/ranges.h>

namespace ndt {

std::string_view arch_name(Arch arch) { return arch == Arch::gpt2 ? "gpt2" : "llama"; }

Arch arch_from_name(std::string_view name) {
  if (name == "gpt2") return Arch::gpt2;
  if (name == "llama") return Arch::llama;
  fail("model.arch = \"{}\" is not a known architecture (gpt2, llama)", name);
}

std::string_view moe_score_name(MoeScore score) { return score == MoeScore::softmax ? "softmax" : "sigmoid"; }

MoeScore moe_score_from_name(std::string_view name) {
  if (name == "softmax") return MoeScore::softmax;
  if (name == "sigmoid") return MoeScore::sigmoid;
  fail("model.moe_score = \"{}\" is not a router score (softmax, sigmoid)", name);
}

std::string_view rope_scaling_name(RopeScaling scaling) { return scaling == RopeScaling::none ? "none" : "llama3"; }

RopeScaling rope_scaling_from_name(std::string_view name) {
  if (name == "none") return RopeScaling::none;
  if (name == "llama3") return RopeScaling::llama3;
  fail("model.rope_scaling = \"{}\" is not a RoPE scaling ndtrain implements (none, llama3)", name);
}

RopeFrequencies ModelConfig::rope_frequencies() const {
  RopeFrequencies f(rope_theta);
  if (rope_scaling == RopeScaling::llama3) {
    f.scaling_factor = rope_scaling_factor;
    f.low_freq_factor = rope_low_freq_factor;
    f.high_freq_factor = rope_high_freq_factor;
    f.original_max_seq_len = static_cast<float>(rope_original_max_seq_len);
  }
  return f;
}

void ModelConfig::set_arch(Arch family) {
  arch = family;
  tied_embeddings = family == Arch::gpt2;
}

namespace {

// An upper bound of the parameter count, in double so that no field can overflow it:
// every block counted with the widest MLP it could have and every bias and norm.
double parameter_count_bound(const ModelConfig& c) {
  const double C = c.d_model, F = std::max(c.d_ff, c.moe_shared_d_ff), E = std::max(c.n_experts, 0);
  const double Fe = c.moe_d_ff > 0 ? c.moe_d_ff : c.d_ff;
  const double block = 4 * C * C + 3 * C * F + E * (3 * Fe * C + C) + 3 * F + 9 * C;
  return c.n_layer * block + (2.0 * c.vocab_size + c.max_seq_len + 2) * C;
}

void validate_llama3_scaling(const ModelConfig& c) {
  NDT_CHECK(std::isfinite(c.rope_scaling_factor) && c.rope_scaling_factor >= 1,
            "model.rope_scaling_factor = {} must be at least 1", c.rope_scaling_factor);
  NDT_CHECK(std::isfinite(c.rope_low_freq_factor) && c.rope_low_freq_factor > 0 &&
                std::isfinite(c.rope_high_freq_factor) && c.rope_high_freq_factor > c.rope_low_freq_factor,
            "model.rope_low_freq_factor = {} and model.rope_high_freq_factor = {} must be positive with the high "
            "one larger",
            c.rope_low_freq_factor, c.rope_high_freq_factor);
  NDT_CHECK(c.rope_original_max_seq_len > 0, "model.rope_original_max_seq_len = {} must be positive",
            c.rope_original_max_seq_len);
}

}  // namespace

void ModelConfig::validate() const {
  auto positive = [](const char* key, int value) {
    NDT_CHECK(value > 0, "model.{} = {} must be positive", key, value);
  };
  positive("vocab_size", vocab_size);
  positive("max_seq_len", max_seq_len);
  positive("n_layer", n_layer);
  positive("n_head", n_head);
  positive("d_model", d_model);
  positive("d_ff", d_ff);
  NDT_CHECK(d_model % n_head == 0, "model.n_head = {} does not divide model.d_model = {}", n_head,
            d_model);
  NDT_CHECK(n_layer <= kMaxLayers, "model.n_layer = {} exceeds {} blocks (the deepest published models have about a "
            "hundred)", n_layer, kMaxLayers);
  if (arch == Arch::llama) {
    positive("n_kv_head", n_kv_head);
    NDT_CHECK(n_head % n_kv_head == 0, "model.n_kv_head = {} does not divide model.n_head = {}",
              n_kv_head, n_head);
    NDT_CHECK(head_dim() % 2 == 0, "RoPE needs an even head dimension: model.d_model / model.n_head = {}",
              head_dim());
    NDT_CHECK(rope_theta > 0, "model.rope_theta = {} must be positive", rope_theta);
    if (rope_scaling == RopeScaling::llama3) validate_llama3_scaling(*this);
  }
  if (n_experts != 0) {
    positive("n_experts", n_experts);
    positive("moe_top_k", moe_top_k);
    positive("moe_every", moe_every);
    NDT_CHECK(moe_top_k <= n_experts, "model.moe_top_k = {} exceeds model.n_experts = {}", moe_top_k, n_experts);
    NDT_CHECK(moe_every <= n_layer, "model.moe_every = {} exceeds model.n_layer = {}: no block would be an MoE block",
              moe_every, n_layer);
    NDT_CHECK(moe_d_ff >= 0, "model.moe_d_ff = {} must be positive (or 0: model.d_ff)", moe_d_ff);
    NDT_CHECK(moe_shared_d_ff >= 0, "model.moe_shared_d_ff = {} must be positive (or 0: no shared MLP)",
              moe_shared_d_ff);
    NDT_CHECK(std::isfinite(moe_capacity_factor) && moe_capacity_factor >= 0,
              "model.moe_capacity_factor = {} must be positive (or 0: dropless)", moe_capacity_factor);
    NDT_CHECK(std::isfinite(moe_aux_loss) && moe_aux_loss >= 0, "model.moe_aux_loss = {} must be >= 0",
              moe_aux_loss);
    NDT_CHECK(std::isfinite(moe_z_loss) && moe_z_loss >= 0, "model.moe_z_loss = {} must be >= 0", moe_z_loss);
  }
  // Every count derived from the fields (parameters, their bytes, FLOPs) stays exact in
  // 64 bits and in double far below this.
  const double params = parameter_count_bound(*this);
  NDT_CHECK(params <= kMaxParameters,
            "the model would have about {:.3g} parameters (model.n_layer = {}, model.d_model = {}, model.d_ff = {}, "
            "model.vocab_size = {}, model.max_seq_len = {}, model.n_experts = {}, model.moe_d_ff = {}): more than "
            "2^50 = {:.3g}, which ndtrain does not count or plan",
            params, n_layer, d_model, d_ff, vocab_size, max_seq_len, n_experts, moe_d_ff, kMaxParameters);
  NDT_CHECK(norm_eps > 0, "model.norm_eps = {} must be positive", norm_eps);
  NDT_CHECK(init_std > 0, "model.init_std = {} must be positive", init_std);
  validate_lora_targets(*this);
}

void validate_lora_targets(const ModelConfig& c) {
  if (!c.lora.enabled()) return;
  // The linears block_parameter_specs names, with min(in, out).
  const int64_t C = c.d_model, KD = int64_t{c.kv_heads()} * c.head_dim();
  std::vector<std::string> linears = {"attn.wq", "attn.wk", "attn.wv", "attn.wo"};
  std::vector<int64_t> widths = {C, std::min(C, KD), std::min(C, KD), C};
  const int64_t dense_ff = c.has_dense_block() ? c.d_ff : c.moe_shared_d_ff;
  const bool gpt2 = c.arch == Arch::gpt2;
  if (dense_ff > 0) {
    for (const char* name : gpt2 ? std::vector<const char*>{"mlp.fc", "mlp.proj"}
                                 : std::vector<const char*>{"mlp.gate", "mlp.up", "mlp.down"}) {
      linears.push_back(name);
      widths.push_back(std::min<int64_t>(C, dense_ff));
    }
  }
  std::vector<std::string> experts;
  if (c.is_moe()) {
    experts = gpt2 ? std::vector<std::string>{"moe.experts.fc", "moe.experts.proj"}
                   : std::vector<std::string>{"moe.experts.gate", "moe.experts.up", "moe.experts.down"};
  }
  validate_lora(c.lora, linears, widths, experts);
}

ModelConfig ModelConfig::preset(std::string_view name) {
  ModelConfig c;
  // The tiny MoE shapes: every block 8 experts of half the dense width, top-2 (so a
  // token uses about the dense model's MLP parameters).
  if (name == "gpt2-moe-tiny" || name == "llama-moe-tiny") {
    c = preset(name == "gpt2-moe-tiny" ? "gpt2-tiny" : "llama-tiny");
    c.n_experts = 8;
    c.moe_top_k = 2;
    c.moe_d_ff = c.d_ff / 2;
    return c;
  }
  if (name == "gpt2-124m" || name == "gpt2-350m" || name == "gpt2-tiny") {
    c.set_arch(Arch::gpt2);
    c.vocab_size = 50257;
    c.max_seq_len = 1024;
    if (name == "gpt2-124m") c.n_layer = 12, c.n_head = 12, c.d_model = 768;
    if (name == "gpt2-350m") c.n_layer = 24, c.n_head = 16, c.d_model = 1024;
    if (name == "gpt2-tiny") c.vocab_size = 256, c.max_seq_len = 256, c.n_layer = 4, c.n_head = 4,
                             c.d_model = 128;
    c.n_kv_head = c.n_head;
    c.d_ff = 4 * c.d_model;
    return c;
  }
  if (name == "llama-small" || name == "llama-tiny") {
    c.set_arch(Arch::llama);
    c.norm_eps = 1e-5f;
    if (name == "llama-small") {
      // About 110M parameters with a 32000-token vocabulary.
      c.vocab_size = 32000, c.max_seq_len = 1024, c.n_layer = 12, c.n_head = 12, c.n_kv_head = 4,
      c.d_model = 768, c.d_ff = 2048;
    } else {
      c.vocab_size = 256, c.max_seq_len = 256, c.n_layer = 4, c.n_head = 4, c.n_kv_head = 2,
      c.d_model = 128, c.d_ff = 352;
    }
    return c;
  }
  if (name == "llama3-8b" || name == "llama3-70b" || name == "llama3-405b") {
    // The Llama 3 shapes (Llama Team, "The Llama 3 Herd of Models", 2024, Table 3), for
    // planning: their 128256-token vocabulary does not fit ndtrain's uint16 token shards.
    c.set_arch(Arch::llama);
    c.vocab_size = 128256, c.max_seq_len = 131072, c.rope_theta = 500000.0f, c.n_kv_head = 8;
    if (name == "llama3-8b") c.n_layer = 32, c.d_model = 4096, c.n_head = 32, c.d_ff = 14336;
    if (name == "llama3-70b") c.n_layer = 80, c.d_model = 8192, c.n_head = 64, c.d_ff = 28672;
    if (name == "llama3-405b") c.n_layer = 126, c.d_model = 16384, c.n_head = 128, c.d_ff = 53248;
    return c;
  }
  if (name == "llama-1b") {
    // Llama 3.2 1B's shape (16 blocks of width 2048, 32 heads on 8 K/V heads, SwiGLU
    // 8192, tied embeddings) with a 32000-token vocabulary: 1.04B parameters, the
    // fine-tuning benchmark's model (docs/performance.md).
    c.set_arch(Arch::llama);
    c.vocab_size = 32000, c.max_seq_len = 2048, c.rope_theta = 500000.0f, c.n_layer = 16, c.d_model = 2048,
    c.n_head = 32, c.n_kv_head = 8, c.d_ff = 8192, c.tied_embeddings = true;
    return c;
  }
  fail("model.preset = \"{}\" is not a known preset ({})", name, fmt::join(preset_names(), ", "));
}

std::vector<std::string> ModelConfig::preset_names() {
  return {"gpt2-124m",     "gpt2-350m",      "gpt2-tiny", "llama-small", "llama-tiny",
          "gpt2-moe-tiny", "llama-moe-tiny", "llama-1b",  "llama3-8b",   "llama3-70b", "llama3-405b"};
}

}  // namespace ndt
