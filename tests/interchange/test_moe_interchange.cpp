// Mixture-of-experts models outside training (issue 35, class 1): a checkpoint and a
// safetensors file carry every MoE setting, and every reader (read_model_checkpoint for
// `ndtrain generate`, `ndtrain convert`, load_safetensors_hf) rebuilds exactly the saved
// model; Llama MoE blocks export under Qwen-MoE's Hugging Face names, element by element;
// a file without ndtrain metadata gives the MoE shape from its tensors and takes the
// routing from the hint; llm.c, which has no experts, refuses an MoE model by name.
#include "../common/command.h"
#include "../common/errors.h"
#include "../common/temp_dir.h"
#include "interchange/hf_names.h"
#include "interchange/llmc.h"
#include "interchange/safetensors.h"
#include "support.h"
#include "train/model_checkpoint.h"

#include <gtest/gtest.h>

#include <string>

namespace ndt {
namespace {

using testing::expect_error;
using testing::TempDir;

// gpt2: every block MoE, no shared MLP. llama: every second block MoE, a shared MLP, and
// every routing setting away from its default.
ModelConfig moe_config(Arch arch) {
  ModelConfig c = ModelConfig::preset(arch == Arch::gpt2 ? "gpt2-tiny" : "llama-tiny");
  c.n_layer = 4;
  c.n_experts = 4;
  c.moe_top_k = 2;
  c.moe_d_ff = 48;
  if (arch == Arch::llama) {
    c.moe_every = 2;
    c.moe_shared_d_ff = 32;
    c.moe_top_k = 1;
    c.moe_score = MoeScore::sigmoid;
    c.moe_normalize_top_k = false;
    c.moe_capacity_factor = 1.5f;
    c.moe_aux_loss = 0.02f;
    c.moe_z_loss = 1e-3f;
  }
  return c;
}

// Catches: a reader rebuilding another model than the one saved (an MoE checkpoint read
// as a dense model: "lacks parameter blocks.0.mlp.fc.weight"; routing settings lost).
TEST(MoeInterchange, CheckpointAndSafetensorsRebuildTheSavedModel) {
  for (Arch arch : {Arch::gpt2, Arch::llama}) {
    SCOPED_TRACE(arch_name(arch));
    TempDir dir;
    const ModelState state = testing::perturbed_state(moe_config(arch));
    write_model_checkpoint(state, dir.path() / "model");
    const ModelState from_checkpoint = read_model_checkpoint(dir.path() / "model");
    testing::expect_same_state(from_checkpoint, state);
    EXPECT_EQ(testing::loss_of(from_checkpoint, 1), testing::loss_of(state, 1));
    save_safetensors_hf(state, dir.file("model.safetensors"));
    testing::expect_same_state(load_safetensors_hf(dir.file("model.safetensors"), std::nullopt), state);
  }
}

// Catches: experts exported transposed, in another order, or under names transformers
// does not know; the router or the shared MLP swapped with a dense MLP.
TEST(MoeInterchange, LlamaExpertsCarryQwenMoeNamesElementByElement) {
  TempDir dir;
  const ModelConfig c = moe_config(Arch::llama);
  const ModelState state = testing::perturbed_state(c);
  save_safetensors_hf(state, dir.file("model.safetensors"));
  const SafetensorsFile file = read_safetensors(dir.file("model.safetensors"));
  const int64_t E = c.n_experts, F = c.moe_d_ff, C = c.d_model, S = c.moe_shared_d_ff;
  auto expect_tensor = [&](const std::string& hf, const Shape& shape, const std::string& ours, int64_t first) {
    SCOPED_TRACE(hf);
    ASSERT_TRUE(file.tensors.count(hf));
    const SafetensorsTensor& t = file.tensors.at(hf);
    ASSERT_EQ(t.shape, shape);
    const std::vector<float>& v = state.tensors.at(ours);
    for (size_t i = 0; i < t.values.size(); ++i) ASSERT_EQ(t.values[i], v[static_cast<size_t>(first) + i]) << i;
  };
  // Block 1 is an MoE block (moe_every = 2): router, experts [E, F, C] one by one, the
  // shared MLP; block 0 keeps the dense MLP's names.
  expect_tensor("model.layers.1.mlp.gate.weight", {E, C}, "blocks.1.moe.router.weight", 0);
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = "model.layers.1.mlp.experts." + std::to_string(e) + ".";
    expect_tensor(x + "gate_proj.weight", {F, C}, "blocks.1.moe.experts.gate.weight", e * F * C);
    expect_tensor(x + "up_proj.weight", {F, C}, "blocks.1.moe.experts.up.weight", e * F * C);
    expect_tensor(x + "down_proj.weight", {C, F}, "blocks.1.moe.experts.down.weight", e * C * F);
  }
  expect_tensor("model.layers.1.mlp.shared_expert.gate_proj.weight", {S, C}, "blocks.1.mlp.gate.weight", 0);
  expect_tensor("model.layers.1.mlp.shared_expert.down_proj.weight", {C, S}, "blocks.1.mlp.down.weight", 0);
  expect_tensor("model.layers.0.mlp.gate_proj.weight", {c.d_ff, C}, "blocks.0.mlp.gate.weight", 0);
  EXPECT_FALSE(file.tensors.count("model.layers.0.mlp.gate.weight"));
  EXPECT_EQ(file.metadata.at("n_experts"), "4");
  EXPECT_EQ(file.metadata.at("moe_score"), "sigmoid");
}

// Catches: a file without ndtrain metadata (written by other tools under the same names)
// read as a dense model, or its routing silently taken as if the file said it.
TEST(MoeInterchange, WithoutMetadataTheShapeComesFromTheTensorsAndTheRoutingFromTheHint) {
  TempDir dir;
  const ModelConfig c = moe_config(Arch::llama);
  const ModelState state = testing::perturbed_state(c);
  save_safetensors_hf(state, dir.file("with.safetensors"));
  SafetensorsFile file = read_safetensors(dir.file("with.safetensors"));
  file.metadata = {{"format", "pt"}};
  write_safetensors(dir.file("without.safetensors"), file, DType::f32);
  ModelConfig hint = ModelConfig::preset("llama-tiny");  // n_head 4, routing at its defaults
  const ModelState read = load_safetensors_hf(dir.file("without.safetensors"), hint);
  EXPECT_EQ(read.config.n_experts, 4);
  EXPECT_EQ(read.config.moe_every, 2);
  EXPECT_EQ(read.config.moe_d_ff, 48);
  EXPECT_EQ(read.config.moe_shared_d_ff, 32);
  EXPECT_EQ(read.config.d_ff, c.d_ff);
  EXPECT_EQ(read.config.moe_top_k, hint.moe_top_k);
  for (const char* key : {"n_head", "norm_eps", "moe_top_k", "moe_score", "moe_capacity_factor"}) {
    EXPECT_TRUE(read.assumed.count(key)) << key;
  }
  EXPECT_FALSE(read.assumed.count("n_experts"));
  EXPECT_EQ(read.tensors, state.tensors);
}

// Catches: an MoE model written to llm.c's dense GPT-2 format (an "internal error" from a
// missing dense MLP tensor, or a file without the experts).
TEST(MoeInterchange, LlmcRefusesAnMoeModelByName) {
  TempDir dir;
  const ModelState state = testing::perturbed_state(moe_config(Arch::gpt2));
  expect_error([&] { save_llmc(state, dir.file("model.bin")); },
               {"llm.c checkpoints hold dense GPT-2 models, not a mixture of experts (model.n_experts = 4)"});
}

// Catches: `ndtrain convert` and `ndtrain generate` rebuilding a dense model from an MoE
// checkpoint, or another MoE model than the saved one (the text would differ).
TEST(MoeInterchange, ConvertAndGenerateRebuildTheSavedMoeModel) {
  TempDir dir;
  const ModelState state = testing::perturbed_state(moe_config(Arch::llama));
  write_model_checkpoint(state, dir.path() / "model");
  const std::string ndtrain = std::string(NDT_BINARY_DIR) + "/ndtrain ";
  auto generate = [&](const std::string& checkpoint) {
    return testing::run_command(ndtrain + "generate --checkpoint " + checkpoint + " --prompt 'The ' --tokens 24 --seed 3");
  };
  const testing::CommandResult original = generate(dir.file("model"));
  ASSERT_EQ(original.exit_code, 0) << original.output;
  for (const auto& [from, to] : {std::pair{dir.file("model"), dir.file("model.safetensors")},
                                 {dir.file("model.safetensors"), dir.file("back")}}) {
    const testing::CommandResult r = testing::run_command(ndtrain + "convert --from " + from + " --to " + to);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("4 experts of width 48, top-1, every 2 blocks"), std::string::npos) << r.output;
  }
  testing::expect_same_state(read_model_checkpoint(dir.path() / "back"), state);
  const testing::CommandResult again = generate(dir.file("back"));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output, original.output);
  const testing::CommandResult llmc = testing::run_command(ndtrain + "convert --from " + dir.file("model") + " --to " +
                                                           dir.file("model.bin"));
  EXPECT_EQ(llmc.exit_code, 1);
  EXPECT_NE(llmc.output.find("not a mixture of experts (model.n_experts = 4)"), std::string::npos) << llmc.output;
}

}  // namespace
}  // namespace ndt
