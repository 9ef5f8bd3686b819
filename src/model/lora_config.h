// LoRA (Hu et al. 2021): low-rank adapters on a model's linear layers, for
// fine-tuning (docs/fine_tuning.md). An adapted layer computes W x + (alpha / r) B A x
// with the base weight W frozen, A [r, in] and B [out, r] trained. These are the
// settings ([lora] in a run config), part of the model's shape: they add parameters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ndt {

struct LoraConfig {
  // The linear layers adapted, by name within a block ("wq", "attn.wq", "mlp.up") or
  // glob pattern ("mlp.*", "*"). Empty: LoRA off.
  std::vector<std::string> targets;
  int rank = 8;
  float alpha = 16.0f;
  float dropout = 0.0f;  // not built: must be 0

  bool enabled() const { return !targets.empty(); }
  float scale() const { return alpha / static_cast<float>(rank); }
  // Whether some target matches the linear `name` ("attn.wq", "mlp.fc", ...).
  bool targets_linear(const std::string& name) const;
};

// lora.targets' TOML list (core/text_list.h: parse_string_list; string_list_text writes
// it back); throws naming lora.targets and the text.
std::vector<std::string> parse_lora_targets(const std::string& text);

// Throws ndt::Error naming the setting: rank <= 0, alpha <= 0, dropout != 0, a target
// that matches none of `linears` (the model's adaptable layers, "attn.wq" ...) or that
// matches a routed expert's weight (`expert_linears`, "moe.experts.fc" ...: not built),
// a rank above min(in, out) of a target (`widths`[i] of linears[i]).
void validate_lora(const LoraConfig& lora, const std::vector<std::string>& linears, const std::vector<int64_t>& widths,
                   const std::vector<std::string>& expert_linears);

}  // namespace ndt
