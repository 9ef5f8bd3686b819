// LoRA export (interchange/lora_export.h, ndtrain convert --merge-lora / --peft): the
// merged weights are base + (alpha / r) B A, the merged model computes what the adapted
// one does, and the PEFT folder holds PEFT's names, shapes and adapter_config.json,
// GPT-2's fused c_attn adapter included.
#include "../common/temp_dir.h"
#include "interchange/hf_names.h"
#include "interchange/lora_export.h"
#include "interchange/safetensors.h"
#include "support.h"
#include "train/model_checkpoint.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace ndt {
namespace {

using testing::TempDir;

ModelConfig lora_model(const char* preset, std::vector<std::string> targets) {
  ModelConfig c = ModelConfig::preset(preset);
  c.n_layer = 2;
  c.lora.targets = std::move(targets);
  c.lora.rank = 4;
  c.lora.alpha = 6;
  return c;
}

// (alpha / r) B A [out, in] in double, from the state's factors of `base`.
std::vector<double> scaled_product(const ModelState& s, const std::string& base) {
  const std::vector<float>& a = s.tensors.at(base + ".lora_a");
  const std::vector<float>& b = s.tensors.at(base + ".lora_b");
  const int64_t r = s.config.lora.rank, in = static_cast<int64_t>(a.size()) / r, out = static_cast<int64_t>(b.size()) / r;
  std::vector<double> d(static_cast<size_t>(out * in), 0.0);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      for (int64_t k = 0; k < r; ++k) d[o * in + i] += static_cast<double>(b[o * r + k]) * a[k * in + i];
      d[o * in + i] *= s.config.lora.scale();
    }
  }
  return d;
}

// Catches: a merge that drops the scale, transposes a factor, merges into the wrong
// weight or leaves adapters (or their config) behind; a merged model that computes
// something else than the adapted one.
TEST(LoraExport, MergedWeightsAreBasePlusScaledProduct) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    const ModelState state = testing::perturbed_state(lora_model(preset, {"wq", "wo", "mlp.*"}));
    const ModelState merged = merge_lora(state);
    EXPECT_FALSE(merged.config.lora.enabled());
    int adapted = 0;
    for (const auto& [name, values] : merged.tensors) {
      ASSERT_FALSE(name.find(".lora_") != std::string::npos) << name;
      const std::string base = name.substr(0, name.size() - std::string(".weight").size());
      if (!state.tensors.count(base + ".lora_a")) {
        EXPECT_EQ(values, state.tensors.at(name)) << name;
        continue;
      }
      ++adapted;
      const std::vector<double> delta = scaled_product(state, base);
      const std::vector<float>& w = state.tensors.at(name);
      for (size_t i = 0; i < w.size(); ++i) {
        const double want = w[i] + delta[i];
        ASSERT_NEAR(values[i], want, 1e-6 * (std::fabs(w[i]) + std::fabs(delta[i])) + 1e-12) << name << " " << i;
      }
    }
    EXPECT_EQ(adapted, 2 * (std::string(preset) == "gpt2-tiny" ? 4 : 5)) << preset;
    EXPECT_NEAR(testing::loss_of(merged, 1), testing::loss_of(state, 1), 1e-5 * testing::loss_of(state, 1)) << preset;
  }
}

SafetensorsTensor tensor(const SafetensorsFile& f, const std::string& name) {
  const auto it = f.tensors.find(name);
  EXPECT_NE(it, f.tensors.end()) << name;
  return it == f.tensors.end() ? SafetensorsTensor{} : it->second;
}

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Catches: names PEFT would not load (the base_model.model. prefix, lora_A / lora_B,
// transformers' module names), factors of the wrong shape, a config missing a field
// PEFT reads or with another value.
TEST(LoraExport, PeftFolderHasPeftNamesShapesAndConfig) {
  TempDir dir;
  const ModelState state = testing::perturbed_state(lora_model("llama-tiny", {"*"}));
  save_peft_adapter(state, dir.file("peft"));
  const SafetensorsFile f = read_safetensors(dir.file("peft/adapter_model.safetensors"));
  const ModelConfig& c = state.config;
  const int64_t C = c.d_model, KD = int64_t{c.kv_heads()} * c.head_dim(), F = c.d_ff, r = 4;
  EXPECT_EQ(f.tensors.size(), static_cast<size_t>(2 * 7 * c.n_layer));
  const std::string l0 = "base_model.model.model.layers.0.";
  EXPECT_EQ(tensor(f, l0 + "self_attn.q_proj.lora_A.weight").shape, (Shape{r, C}));
  EXPECT_EQ(tensor(f, l0 + "self_attn.q_proj.lora_B.weight").shape, (Shape{C, r}));
  EXPECT_EQ(tensor(f, l0 + "self_attn.k_proj.lora_B.weight").shape, (Shape{KD, r}));
  EXPECT_EQ(tensor(f, l0 + "mlp.down_proj.lora_A.weight").shape, (Shape{r, F}));
  EXPECT_EQ(tensor(f, l0 + "mlp.up_proj.lora_B.weight").shape, (Shape{F, r}));
  EXPECT_EQ(tensor(f, l0 + "self_attn.o_proj.lora_A.weight").values, state.tensors.at("blocks.0.attn.wo.lora_a"));
  EXPECT_EQ(tensor(f, l0 + "mlp.gate_proj.lora_B.weight").values, state.tensors.at("blocks.0.mlp.gate.lora_b"));
  const nlohmann::json j = read_json(dir.path() / "peft" / "adapter_config.json");
  EXPECT_EQ(j["peft_type"], "LORA");
  EXPECT_EQ(j["task_type"], "CAUSAL_LM");
  EXPECT_EQ(j["r"], 4);
  EXPECT_EQ(j["lora_alpha"], 6.0);
  EXPECT_EQ(j["lora_dropout"], 0.0);
  EXPECT_EQ(j["bias"], "none");
  EXPECT_EQ(j["target_modules"].get<std::set<std::string>>(),
            (std::set<std::string>{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                   "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}));
  EXPECT_TRUE(j["rank_pattern"].empty());
}

// Catches: GPT-2's fused c_attn adapter with the factors out of place (B not block-
// diagonal, rows of k where v belongs), a scale PEFT would compute differently (rank
// 2r needs alpha 2 alpha), attn.c_proj confused with mlp.c_proj.
TEST(LoraExport, Gpt2FusedQkvAdapterAppliesAsTheSeparateOnes) {
  TempDir dir;
  const ModelState state = testing::perturbed_state(lora_model("gpt2-tiny", {"wq", "wv", "wo"}));
  save_peft_adapter(state, dir.file("peft"));
  const SafetensorsFile f = read_safetensors(dir.file("peft/adapter_model.safetensors"));
  const nlohmann::json j = read_json(dir.path() / "peft" / "adapter_config.json");
  EXPECT_EQ(j["target_modules"].get<std::set<std::string>>(), (std::set<std::string>{"attn.c_attn", "attn.c_proj"}));
  EXPECT_EQ(j["rank_pattern"]["attn.c_attn"], 8);
  EXPECT_EQ(j["alpha_pattern"]["attn.c_attn"], 12.0);
  EXPECT_EQ(j["fan_in_fan_out"], true);
  const int64_t C = state.config.d_model;
  const std::string h0 = "base_model.model.transformer.h.0.attn.";
  const SafetensorsTensor a = tensor(f, h0 + "c_attn.lora_A.weight"), b = tensor(f, h0 + "c_attn.lora_B.weight");
  ASSERT_EQ(a.shape, (Shape{8, C}));
  ASSERT_EQ(b.shape, (Shape{3 * C, 8}));
  // PEFT's delta on c_attn, (12 / 8) B A [3C, C], against the separate adapters' (wk: none).
  const std::vector<double> q = scaled_product(state, "blocks.0.attn.wq"), v = scaled_product(state, "blocks.0.attn.wv");
  for (int64_t o = 0; o < 3 * C; ++o) {
    for (int64_t i = 0; i < C; ++i) {
      double delta = 0;
      for (int64_t k = 0; k < 8; ++k) delta += static_cast<double>(b.values[o * 8 + k]) * a.values[k * C + i];
      delta *= 12.0 / 8.0;
      const double want = o < C ? q[o * C + i] : o < 2 * C ? 0.0 : v[(o - 2 * C) * C + i];
      ASSERT_NEAR(delta, want, 1e-6 * (std::fabs(want) + 1e-3)) << "row " << o << " column " << i;
    }
  }
  EXPECT_EQ(tensor(f, h0 + "c_proj.lora_A.weight").shape, (Shape{4, C}));
}

TEST(LoraExport, ModelsWithoutAdaptersAreRefused) {
  const ModelState state = testing::perturbed_state(ModelConfig::preset("gpt2-tiny"));
  EXPECT_THROW(merge_lora(state), Error);
}

std::pair<int, std::string> ndtrain(const std::string& args) {
  const std::string command = std::string(NDT_BINARY_DIR) + "/ndtrain " + args + " 2>&1";
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128, output};
}

// Catches: convert writing a LoRA model to a format that cannot hold adapters (losing
// them silently), --merge-lora or --peft not reaching the writers.
TEST(LoraConvertCommand, MergesOrWritesThePeftFolderAndRefusesToDropAdapters) {
  TempDir dir;
  const ModelState state = testing::perturbed_state(lora_model("gpt2-tiny", {"wq", "mlp.fc"}));
  write_model_checkpoint(state, dir.path() / "ckpt");
  auto [code, out] = ndtrain("convert --from " + dir.file("ckpt") + " --to " + dir.file("m.safetensors"));
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("--merge-lora"), std::string::npos) << out;
  std::tie(code, out) =
      ndtrain("convert --from " + dir.file("ckpt") + " --to " + dir.file("m.safetensors") + " --merge-lora");
  ASSERT_EQ(code, 0) << out;
  testing::expect_same_state(load_safetensors_hf(dir.file("m.safetensors"), std::nullopt), merge_lora(state));
  std::tie(code, out) = ndtrain("convert --from " + dir.file("ckpt") + " --to " + dir.file("peft") + " --peft");
  ASSERT_EQ(code, 0) << out;
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "peft" / "adapter_config.json"));
  EXPECT_EQ(read_safetensors(dir.file("peft/adapter_model.safetensors")).tensors.size(), 4u * state.config.n_layer);
}

}  // namespace
}  // namespace ndt
