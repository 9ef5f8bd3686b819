#include "model/lora_config.h"

#include "core/error.h"
#include "core/text_list.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fnmatch.h>

#include <algorithm>
#include <cmath>

namespace ndt {

namespace {

// A target names a linear by its path in the block ("attn.wq") or its last part ("wq"),
// either possibly a glob pattern.
bool target_matches(const std::string& target, const std::string& linear) {
  const std::string last = linear.substr(linear.rfind('.') + 1);
  return fnmatch(target.c_str(), linear.c_str(), 0) == 0 || fnmatch(target.c_str(), last.c_str(), 0) == 0;
}

}  // namespace

bool LoraConfig::targets_linear(const std::string& name) const {
  return std::any_of(targets.begin(), targets.end(), [&](const std::string& t) { return target_matches(t, name); });
}

std::vector<std::string> parse_lora_targets(const std::string& text) { return parse_string_list("lora.targets", text); }

void validate_lora(const LoraConfig& lora, const std::vector<std::string>& linears, const std::vector<int64_t>& widths,
                   const std::vector<std::string>& expert_linears) {
  if (!lora.enabled()) return;
  NDT_CHECK(lora.rank > 0, "lora.rank = {} must be positive", lora.rank);
  NDT_CHECK(std::isfinite(lora.alpha) && lora.alpha > 0, "lora.alpha = {} must be positive", lora.alpha);
  NDT_CHECK(lora.dropout == 0.0f, "lora.dropout = {}: dropout on the adapters' input is not built (set 0)",
            lora.dropout);
  for (const std::string& target : lora.targets) {
    for (const std::string& expert : expert_linears) {
      NDT_CHECK(!target_matches(target, expert),
                "lora.targets: \"{}\" matches the routed experts' {} (moe.experts): adapters on routed experts are "
                "not built; name the dense layers (e.g. \"mlp.*\", \"wq\")",
                target, expert);
    }
    bool matched = false;
    for (size_t i = 0; i < linears.size(); ++i) {
      if (!target_matches(target, linears[i])) continue;
      matched = true;
      NDT_CHECK(lora.rank <= widths[i], "lora.rank = {} exceeds the width of {} (min(in, out) = {})", lora.rank,
                linears[i], widths[i]);
    }
    NDT_CHECK(matched, "lora.targets: \"{}\" matches no linear layer of the model (its layers: {})", target,
              fmt::join(linears, ", "));
  }
}

}  // namespace ndt
