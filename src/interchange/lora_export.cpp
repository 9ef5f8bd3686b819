#include "interchange/lora_export.h"

#include "core/error.h"
#include "core/output_file.h"
#include "interchange/hf_names.h"
#include "interchange/safetensors.h"
#include "model/lora.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>

namespace ndt {

namespace {

namespace fs = std::filesystem;

std::string base_of(const std::string& weight) { return weight.substr(0, weight.size() - std::string(".weight").size()); }

void require_adapters(const ModelState& state) {
  NDT_CHECK(state.config.lora.enabled(), "the model has no LoRA adapters (lora.targets is empty): nothing to {}",
            "export or merge");
}

}  // namespace

ModelState merge_lora(const ModelState& state) {
  require_adapters(state);
  ModelState merged = state;
  merged.config.lora = LoraConfig{};
  const LoraConfig& lora = state.config.lora;
  const int64_t r = lora.rank;
  for (const ParameterSpec& spec : model_parameter_specs(state.config)) {
    if (!is_lora_parameter(spec.name) || spec.name.back() != 'a') continue;
    const std::string base = spec.name.substr(0, spec.name.size() - std::string(".lora_a").size());
    const std::vector<float>& a = state.tensors.at(base + ".lora_a");  // [r, in]
    const std::vector<float>& b = state.tensors.at(base + ".lora_b");  // [out, r]
    std::vector<float>& w = merged.tensors.at(base + ".weight");       // [out, in]
    const int64_t in = spec.logical_shape[1], out = static_cast<int64_t>(w.size()) / in;
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < in; ++i) {
        double delta = 0;
        for (int64_t k = 0; k < r; ++k) delta += static_cast<double>(b[o * r + k]) * a[k * in + i];
        w[o * in + i] += static_cast<float>(lora.scale() * delta);
      }
    }
    merged.tensors.erase(base + ".lora_a");
    merged.tensors.erase(base + ".lora_b");
  }
  return merged;
}

namespace {

// One PEFT adapter on a Hugging Face linear holding `parts` (adapted or not) stacked on
// its output dim: A [k r, in] the adapted parts' A stacked, B [out, k r] with each
// adapted part's B in its rows and its own r columns. k = 0: the module is not adapted.
struct PeftAdapter {
  SafetensorsTensor a, b;
  int adapted = 0;
};

PeftAdapter peft_adapter(const ModelState& state, const HfLinear& linear) {
  const int64_t r = state.config.lora.rank;
  std::vector<std::string> adapted;
  int64_t out = 0, in = 0;
  for (const std::string& part : linear.parts) {
    const std::vector<float>& w = state.tensors.at(part);
    const auto it = state.tensors.find(base_of(part) + ".lora_a");
    if (it != state.tensors.end()) {
      adapted.push_back(base_of(part));
      in = static_cast<int64_t>(it->second.size()) / r;
    }
    out += static_cast<int64_t>(w.size());
  }
  PeftAdapter p;
  p.adapted = static_cast<int>(adapted.size());
  if (adapted.empty()) return p;
  out /= in;
  const int64_t R = r * p.adapted;
  p.a = {{R, in}, {}};
  p.b = {{out, R}, std::vector<float>(static_cast<size_t>(out * R), 0.0f)};
  int64_t row = 0, column = 0;
  for (const std::string& part : linear.parts) {
    const int64_t rows = static_cast<int64_t>(state.tensors.at(part).size()) / in;
    const auto a = state.tensors.find(base_of(part) + ".lora_a");
    if (a != state.tensors.end()) {
      p.a.values.insert(p.a.values.end(), a->second.begin(), a->second.end());
      const std::vector<float>& b = state.tensors.at(base_of(part) + ".lora_b");
      for (int64_t o = 0; o < rows; ++o) {
        for (int64_t k = 0; k < r; ++k) p.b.values[static_cast<size_t>((row + o) * R + column + k)] = b[o * r + k];
      }
      column += r;
    }
    row += rows;
  }
  return p;
}

// "self_attn.q_proj", "attn.c_attn", "mlp.c_proj": the module's last two parts, which
// PEFT's target_modules matches as a suffix (GPT-2's attn.c_proj apart from mlp.c_proj).
std::string module_key(const std::string& module) {
  const size_t last = module.rfind('.');
  return module.substr(module.rfind('.', last - 1) + 1);
}

void write_text(const fs::path& path, const std::string& text) {
  AtomicFile file(path);
  file.write(text.data(), text.size());
  file.commit();
}

}  // namespace

void save_peft_adapter(const ModelState& state, const std::string& dir) {
  require_adapters(state);
  NDT_CHECK(!fs::exists(dir), "--peft {} already exists: convert does not overwrite", dir);
  const LoraConfig& lora = state.config.lora;
  SafetensorsFile file;
  file.metadata["format"] = "pt";
  std::set<std::string> targets;
  nlohmann::json rank_pattern = nlohmann::json::object(), alpha_pattern = nlohmann::json::object();
  bool conv1d = false;
  for (const HfLinear& linear : hf_linears(state.config)) {
    PeftAdapter p = peft_adapter(state, linear);
    if (p.adapted == 0) continue;
    const std::string key = module_key(linear.module);
    targets.insert(key);
    conv1d = conv1d || linear.conv1d;
    if (p.adapted > 1) {  // a fused module (c_attn): rank k r, alpha k alpha
      rank_pattern[key] = lora.rank * p.adapted;
      alpha_pattern[key] = lora.alpha * static_cast<float>(p.adapted);
    }
    const std::string name = "base_model.model." + linear.module;
    file.tensors[name + ".lora_A.weight"] = std::move(p.a);
    file.tensors[name + ".lora_B.weight"] = std::move(p.b);
  }
  nlohmann::json config = {{"peft_type", "LORA"},
                           {"task_type", "CAUSAL_LM"},
                           {"r", lora.rank},
                           {"lora_alpha", lora.alpha},
                           {"lora_dropout", lora.dropout},
                           {"target_modules", std::vector<std::string>(targets.begin(), targets.end())},
                           {"bias", "none"},
                           {"fan_in_fan_out", conv1d},
                           {"init_lora_weights", "gaussian"},
                           {"rank_pattern", rank_pattern},
                           {"alpha_pattern", alpha_pattern},
                           {"modules_to_save", nullptr},
                           {"base_model_name_or_path", nullptr},
                           {"inference_mode", true}};
  fs::create_directories(dir);
  write_safetensors((fs::path(dir) / "adapter_model.safetensors").string(), file);
  write_text(fs::path(dir) / "adapter_config.json", config.dump(2) + "\n");
}

}  // namespace ndt
