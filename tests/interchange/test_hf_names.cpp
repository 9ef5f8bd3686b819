// Hugging Face safetensors export/import: bit-exact round trips with the config read
// back from metadata (GPT-2, Llama, Llama with QK-norm), loss parity through a fresh
// model, GPT-2's fused and transposed Conv1D layout checked element by element,
// import without metadata (config hint, unprefixed GPT-2 names, ignored buffers),
// BF16 and F16 export read back as the rounded weights, and the import errors.
#include "../common/errors.h"
#include "../common/temp_dir.h"
#include "interchange/hf_names.h"
#include "interchange/safetensors.h"
#include "support.h"
#include "train/model_source.h"

#include <gtest/gtest.h>

namespace ndt {
namespace {

using testing::expect_error;

class HfRoundTrip : public ::testing::TestWithParam<ModelConfig> {};

TEST_P(HfRoundTrip, IsBitExactWithConfigFromMetadata) {
  testing::TempDir dir;
  const ModelState state = testing::perturbed_state(GetParam());
  save_safetensors_hf(state, dir.file("m.safetensors"));
  const ModelState back = load_safetensors_hf(dir.file("m.safetensors"), std::nullopt);
  testing::expect_same_state(state, back);
  EXPECT_EQ(testing::loss_of(back, /*seed=*/99), testing::loss_of(state, /*seed=*/7));
}

// Catches: a bf16/f16 export that is not the rounded weights (truncated, or labelled
// F32), or an import path (load_safetensors_hf, read_model_file as train.init_from and
// convert use it) that does not widen it back exactly.
TEST_P(HfRoundTrip, Bf16AndF16GiveTheRoundedWeights) {
  const ModelState state = testing::perturbed_state(GetParam());
  for (const auto& [dtype, name] : {std::pair{DType::bf16, "BF16"}, std::pair{DType::f16, "F16"}}) {
    testing::TempDir dir;
    const std::string path = dir.file("m.safetensors");
    save_safetensors_hf(state, path, dtype);
    EXPECT_EQ(testing::safetensors_dtypes(path), std::set<std::string>{name});

    const ModelState rounded = testing::rounded_to(state, dtype);
    EXPECT_NE(rounded.tensors.at("wte.weight"), state.tensors.at("wte.weight"));  // rounding did something
    testing::expect_same_state(rounded, load_safetensors_hf(path, std::nullopt));
    testing::expect_same_state(rounded, read_model_file(path));
  }
}

// ndtrain-only variants too: GPT-2 with QK-norm and an untied head, Llama tied.
ModelConfig variant(const char* preset, bool qk_norm, bool tied) {
  ModelConfig c = ModelConfig::preset(preset);
  c.qk_norm = qk_norm;
  c.tied_embeddings = tied;
  return c;
}

INSTANTIATE_TEST_SUITE_P(Configs, HfRoundTrip,
                         ::testing::Values(ModelConfig::preset("gpt2-tiny"),
                                           ModelConfig::preset("llama-tiny"), testing::llama_qk_norm(),
                                           variant("gpt2-tiny", true, false),
                                           variant("llama-tiny", false, true)));

TEST(HfNames, Gpt2LayoutIsTransformersConv1D) {
  testing::TempDir dir;
  const ModelState state = testing::perturbed_state(ModelConfig::preset("gpt2-tiny"));
  save_safetensors_hf(state, dir.file("g.safetensors"));
  SafetensorsFile f = read_safetensors(dir.file("g.safetensors"));
  const int64_t C = state.config.d_model, F = state.config.d_ff;
  auto ours = [&](const std::string& name) { return state.tensors.at(name); };

  const SafetensorsTensor& c_attn = f.tensors.at("transformer.h.1.attn.c_attn.weight");
  ASSERT_EQ(c_attn.shape, (Shape{C, 3 * C}));
  const int64_t i = 5, j = 17;  // HF c_attn.weight[in = i, out = C + j] is our wk[j, i]
  EXPECT_EQ(c_attn.values[i * 3 * C + C + j], ours("blocks.1.attn.wk.weight")[j * C + i]);
  EXPECT_EQ(c_attn.values[i * 3 * C + j], ours("blocks.1.attn.wq.weight")[j * C + i]);
  EXPECT_EQ(c_attn.values[i * 3 * C + 2 * C + j], ours("blocks.1.attn.wv.weight")[j * C + i]);
  EXPECT_EQ(f.tensors.at("transformer.h.1.attn.c_attn.bias").values[2 * C + j],
            ours("blocks.1.attn.wv.bias")[j]);
  const SafetensorsTensor& c_fc = f.tensors.at("transformer.h.0.mlp.c_fc.weight");
  ASSERT_EQ(c_fc.shape, (Shape{C, F}));
  EXPECT_EQ(c_fc.values[i * F + 300], ours("blocks.0.mlp.fc.weight")[300 * C + i]);
  const SafetensorsTensor& c_proj = f.tensors.at("transformer.h.0.mlp.c_proj.weight");
  ASSERT_EQ(c_proj.shape, (Shape{F, C}));
  EXPECT_EQ(c_proj.values[300 * C + i], ours("blocks.0.mlp.proj.weight")[i * F + 300]);

  EXPECT_FALSE(f.tensors.count("lm_head.weight"));  // tied
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(f.metadata.at("n_head"), "4");
  EXPECT_EQ(f.metadata.at("norm_eps"), "1e-05");
}

TEST(HfNames, LlamaNamesAreTransformers) {
  testing::TempDir dir;
  const ModelState state = testing::perturbed_state(testing::llama_qk_norm());
  save_safetensors_hf(state, dir.file("l.safetensors"));
  SafetensorsFile f = read_safetensors(dir.file("l.safetensors"));
  EXPECT_EQ(f.tensors.at("model.layers.3.self_attn.k_proj.weight").values,
            state.tensors.at("blocks.3.attn.wk.weight"));
  EXPECT_EQ(f.tensors.at("model.layers.3.self_attn.k_proj.weight").shape, (Shape{64, 128}));
  EXPECT_EQ(f.tensors.at("model.layers.2.self_attn.q_norm.weight").values,
            state.tensors.at("blocks.2.attn.q_norm.weight"));
  EXPECT_EQ(f.tensors.at("model.layers.0.mlp.down_proj.weight").values,
            state.tensors.at("blocks.0.mlp.down.weight"));
  EXPECT_EQ(f.tensors.at("lm_head.weight").values, state.tensors.at("lm_head.weight"));
  EXPECT_EQ(f.tensors.at("model.norm.weight").values, state.tensors.at("lnf.weight"));
}

// Rewrites a file through `edit` (tensors and metadata).
template <typename Edit>
void rewrite(const std::string& path, Edit edit) {
  SafetensorsFile f = read_safetensors(path);
  edit(f);
  write_safetensors(path, f);
}

TEST(HfNames, ImportWithoutMetadataInfersShapesAndNeedsHint) {
  testing::TempDir dir;
  for (const ModelConfig& config : {ModelConfig::preset("gpt2-tiny"), testing::llama_qk_norm()}) {
    const std::string path = dir.file("nometa.safetensors");
    const ModelState state = testing::perturbed_state(config);
    save_safetensors_hf(state, path);
    rewrite(path, [](SafetensorsFile& f) { f.metadata = {{"format", "pt"}}; });
    expect_error([&] { load_safetensors_hf(path, std::nullopt); },
                 {path, "no ndtrain config metadata", "n_head cannot be inferred", "config hint"});
    ModelConfig hint;  // defaults, except what shapes cannot tell
    hint.n_head = 4;
    hint.max_seq_len = 256;
    testing::expect_same_state(state, load_safetensors_hf(path, hint));
  }
}

TEST(HfNames, ImportsUnprefixedGpt2WithBuffersAndTiedHead) {
  testing::TempDir dir;
  const std::string path = dir.file("gpt2.safetensors");
  const ModelState state = testing::perturbed_state(ModelConfig::preset("gpt2-tiny"));
  save_safetensors_hf(state, path);
  rewrite(path, [](SafetensorsFile& f) {
    SafetensorsFile plain{{}, {{"format", "pt"}}};  // as the published gpt2 checkpoint
    for (auto& [name, t] : f.tensors) plain.tensors[name.substr(std::string("transformer.").size())] = t;
    plain.tensors["h.0.attn.bias"] = {{1, 1, 2, 2}, {1, 0, 1, 1}};
    plain.tensors["h.0.attn.masked_bias"] = {{}, {-1e4f}};
    plain.tensors["lm_head.weight"] = plain.tensors["wte.weight"];
    f = plain;
  });
  ModelConfig hint;
  hint.n_head = 4;
  testing::expect_same_state(state, load_safetensors_hf(path, hint));
}

TEST(HfNames, ImportErrorsNameTheTensor) {
  testing::TempDir dir;
  const std::string path = dir.file("e.safetensors");
  auto expect = [&](const ModelConfig& config, auto edit, const std::vector<std::string>& parts) {
    save_safetensors_hf(testing::perturbed_state(config), path);
    rewrite(path, edit);
    std::vector<std::string> all = parts;
    all.push_back(path);
    expect_error([&] { load_safetensors_hf(path, std::nullopt); }, all);
  };
  const ModelConfig gpt2 = ModelConfig::preset("gpt2-tiny"), llama = ModelConfig::preset("llama-tiny");
  expect(llama, [](SafetensorsFile& f) { f.tensors.erase("model.layers.1.mlp.up_proj.weight"); },
         {"missing tensor model.layers.1.mlp.up_proj.weight", "blocks.1.mlp.up.weight"});
  expect(gpt2,
         [](SafetensorsFile& f) {
           f.tensors["transformer.h.2.attn.c_attn.weight"] = {{128, 100}, std::vector<float>(12800)};
         },
         {"tensor transformer.h.2.attn.c_attn.weight has shape [128, 100], expected [128, 384]"});
  expect(llama,
         [](SafetensorsFile& f) {
           f.tensors["model.layers.0.self_attn.q_proj.bias"] = {{128}, std::vector<float>(128)};
           f.tensors["extra"] = {{1}, {0}};
         },
         {"unexpected tensors", "extra, model.layers.0.self_attn.q_proj.bias"});
  expect(gpt2, [](SafetensorsFile& f) { f.metadata.erase("d_ff"); }, {"metadata", "lacks field d_ff"});
  expect(gpt2, [](SafetensorsFile& f) { f.metadata["n_layer"] = "four"; },
         {"n_layer = \"four\" does not parse"});
  expect(llama,
         [](SafetensorsFile& f) {
           f.tensors.erase("model.embed_tokens.weight");
           f.metadata.clear();
         },
         {"cannot tell the architecture"});
}

}  // namespace
}  // namespace ndt
