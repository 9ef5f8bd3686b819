// Hugging Face model folders (interchange/hf_folder.h, hf_slice_reader.h,
// hf_folder_writer.h): folders made by the test in transformers' layout (Qwen2 with q/k/v
// biases and Llama 3 rope scaling, sharded; GPT-2 under the published names; Qwen3 with
// QK-norm) read into exactly the tensors the file holds, written back by
// `ndtrain convert --to-hf` (sharded with a tiny --max-shard-size) and read again
// bit-exactly; a box reads only its bytes; every bad folder is named.
#include "../common/errors.h"
#include "../common/hf_folder.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "interchange/hf_folder.h"
#include "interchange/hf_folder_writer.h"
#include "interchange/hf_slice_reader.h"
#include "support.h"
#include "train/model_source.h"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ndt {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using testing::HfFolderSpec;
using testing::HfTensors;
using testing::TempDir;

std::string run_ndtrain(const std::string& args, int* exit_code) {
  FILE* pipe = ::popen((std::string(NDT_BINARY_DIR) + "/ndtrain " + args + " 2>&1").c_str(), "r");
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  const int status = ::pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return out;
}

std::string file_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Row r, column c of a [rows, cols] tensor.
float at(const SafetensorsTensor& t, int64_t r, int64_t c) { return t.values[static_cast<size_t>(r * t.shape[1] + c)]; }

// Every tensor of every safetensors file of a folder, by name.
HfTensors folder_tensors(const fs::path& dir) {
  HfTensors all;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    for (auto& [name, t] : read_safetensors(entry.path().string()).tensors) all[name] = t;
  }
  return all;
}

void expect_same_tensors(const HfTensors& a, const HfTensors& b, const std::string& prefix_a = "",
                         const std::string& prefix_b = "") {
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(prefix_b + name.substr(prefix_a.size()))) << name;
    const SafetensorsTensor& other = b.at(prefix_b + name.substr(prefix_a.size()));
    EXPECT_EQ(t.shape, other.shape) << name;
    EXPECT_EQ(t.values, other.values) << name;
  }
}

// Catches: a q/k/v bias, the rope scaling or the norm eps of config.json lost on import,
// a tensor copied under the wrong name, shards not followed through the index.
TEST(HfFolder, AShardedQwen2FolderWithLlama3ScalingReadsAsItsFileSays) {
  TempDir dir;
  HfFolderSpec spec;
  spec.llama3_scaling = true;
  const HfTensors hf = testing::write_hf_folder_for_test(dir.path() / "qwen2", spec);
  ASSERT_EQ(model_format_of((dir.path() / "qwen2").string()), ModelFormat::hf_folder);
  const ModelState state = read_model_file((dir.path() / "qwen2").string());
  const ModelConfig& c = state.config;
  EXPECT_EQ(c.arch, Arch::llama);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(c.norm_eps, 1e-6f);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling, RopeScaling::llama3);
  EXPECT_EQ(c.rope_scaling_factor, 8.0f);
  EXPECT_EQ(c.rope_high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_original_max_seq_len, 16);
  EXPECT_EQ(c.n_kv_head, 2);
  EXPECT_EQ(c.d_ff, 40);
  const std::map<std::string, std::string> names = {
      {"wte.weight", "model.embed_tokens.weight"},
      {"lm_head.weight", "lm_head.weight"},
      {"lnf.weight", "model.norm.weight"},
      {"blocks.1.attn.wq.bias", "model.layers.1.self_attn.q_proj.bias"},
      {"blocks.1.attn.wk.bias", "model.layers.1.self_attn.k_proj.bias"},
      {"blocks.0.attn.wv.bias", "model.layers.0.self_attn.v_proj.bias"},
      {"blocks.0.attn.wk.weight", "model.layers.0.self_attn.k_proj.weight"},
      {"blocks.1.attn.wo.weight", "model.layers.1.self_attn.o_proj.weight"},
      {"blocks.0.mlp.down.weight", "model.layers.0.mlp.down_proj.weight"},
      {"blocks.1.ln2.weight", "model.layers.1.post_attention_layernorm.weight"}};
  for (const auto& [ours, theirs] : names) EXPECT_EQ(state.tensors.at(ours), hf.at(theirs).values) << ours;
  EXPECT_EQ(state.tensors.size(), hf.size());
}

// Catches: an export that loses the family (qwen2 written as llama), the rope scaling or a
// bias; shards over the limit; the tokenizer left behind; any bit changed on the way.
TEST(HfFolder, ConvertToHfWritesShardsThatReadBackBitExactly) {
  TempDir dir;
  HfFolderSpec spec;
  spec.llama3_scaling = true;
  const HfTensors hf = testing::write_hf_folder_for_test(dir.path() / "in", spec);
  int code = 0;
  const std::string out = run_ndtrain("convert --from " + dir.file("in") + " --to-hf " + dir.file("out") +
                                          " --max-shard-size 8000", &code);
  ASSERT_EQ(code, 0) << out;
  const fs::path exported = dir.path() / "out";
  EXPECT_EQ(file_text(exported / "tokenizer.json"), file_text(dir.path() / "in" / "tokenizer.json"));
  const nlohmann::json config = nlohmann::json::parse(file_text(exported / "config.json"));
  EXPECT_EQ(config["model_type"], "qwen2");
  EXPECT_EQ(config["architectures"][0], "Qwen2ForCausalLM");
  EXPECT_EQ(config["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(config["rope_scaling"]["original_max_position_embeddings"], 16);
  EXPECT_EQ(config["rms_norm_eps"], 1e-6);
  const nlohmann::json index = nlohmann::json::parse(file_text(exported / "model.safetensors.index.json"));
  std::set<std::string> shards;
  for (const auto& [name, file] : index["weight_map"].items()) shards.insert(file.get<std::string>());
  EXPECT_GT(shards.size(), 2u);
  for (const std::string& shard : shards) {
    const HfTensors held = read_safetensors((exported / shard).string()).tensors;
    uint64_t bytes = 0;
    for (const auto& [name, t] : held) bytes += t.values.size() * 4;
    EXPECT_TRUE(bytes <= 8000 || held.size() == 1) << shard << " holds " << bytes << " bytes";
  }
  expect_same_tensors(hf, folder_tensors(exported));
  testing::expect_same_state(read_model_file(dir.file("in")), read_model_file(exported.string()));
  EXPECT_NE(run_ndtrain("convert --from " + dir.file("in") + " --to-hf " + dir.file("out"), &code)
                .find("already exists"), std::string::npos);
}

// Catches: a folder that trains from other weights than its own, or a trained model that
// does not survive export and import bit for bit (the whole path a fine-tuning takes).
TEST(HfFolder, ImportsTrainsExportsAndReimportsBitExactly) {
  TempDir dir;
  HfFolderSpec spec;
  spec.llama3_scaling = true;
  spec.vocab = 256;  // byte-level data
  testing::write_hf_folder_for_test(dir.path() / "in", spec);
  write_shard(dir.file("train.bin"), testing::synthetic_text(4000, 7));
  RunConfig c = testing::small_run(dir.file("train.bin"), 3);
  c.model = open_hf_folder(dir.file("in")).config;
  c.init_from = dir.file("in");
  Trainer trainer(c, testing::one_rank_mesh(), nullptr);
  testing::expect_same_state(read_model_file(dir.file("in")), state_of(trainer.model()));
  for (int s = 0; s < 3; ++s) trainer.step();
  const ModelState trained = state_of(trainer.model());
  EXPECT_NE(trained.tensors.at("blocks.0.attn.wq.bias"), read_model_file(dir.file("in")).tensors.at("blocks.0.attn.wq.bias"));
  write_hf_folder(trained, dir.file("out"), DType::f32, /*max_shard_bytes=*/6000, {dir.file("in/tokenizer.json")});
  EXPECT_TRUE(fs::exists(dir.path() / "out" / "model.safetensors.index.json"));
  testing::expect_same_state(trained, read_model_file(dir.file("out")));
  RunConfig again = c;
  again.init_from = dir.file("out");
  Trainer restarted(again, testing::one_rank_mesh(), nullptr);
  EXPECT_EQ(restarted.full_parameters(), trainer.full_parameters());
}

// Catches: a run config that must repeat every model.* key of the folder it starts from,
// or an explicit key silently overridden by the folder.
TEST(HfFolder, InitFromAFolderTakesTheModelFromItsConfigJson) {
  TempDir dir;
  HfFolderSpec spec;
  spec.llama3_scaling = true;
  spec.vocab = 256;
  testing::write_hf_folder_for_test(dir.path() / "in", spec);
  write_shard(dir.file("train.bin"), testing::synthetic_text(4000, 7));
  {
    std::ofstream toml(dir.file("run.toml"));
    toml << "[train]\ninit_from = \"" << dir.file("in") << "\"\n[data]\ntrain = \"" << dir.file("train.bin") << "\"\n";
  }
  const ModelConfig folder = open_hf_folder(dir.file("in")).config;
  RunConfig c = load_run_config(dir.file("run.toml"), {"train.seq_len=16", "train.batch_size=2", "runtime.out_dir="});
  EXPECT_EQ(config_differences(folder, c.model, "there", {}), "");
  Trainer trainer(c, testing::one_rank_mesh(), nullptr);
  testing::expect_same_state(read_model_file(dir.file("in")), state_of(trainer.model()));
  // An explicit key overrides the folder's, and the weights then do not fit: named.
  RunConfig changed = load_run_config(dir.file("run.toml"), {"train.seq_len=16", "train.batch_size=2",
                                                            "runtime.out_dir=", "model.d_ff=" + std::to_string(folder.d_ff * 2)});
  expect_error([&] { Trainer t(changed, testing::one_rank_mesh(), nullptr); },
               {"does not match the model", "model.d_ff"});
}

// Catches: GPT-2's fused, transposed c_attn split at the wrong column or not transposed;
// Qwen3's q_norm/k_norm or a tied output layer lost; either not reading back bit-exactly.
TEST(HfFolder, Gpt2AndQwen3FoldersRoundTrip) {
  TempDir dir;
  HfFolderSpec gpt2;
  gpt2.model_type = "gpt2";
  gpt2.tied = true;
  gpt2.shards = 1;
  const HfTensors g = testing::write_hf_folder_for_test(dir.path() / "gpt2", gpt2);
  const ModelState gs = read_model_file(dir.file("gpt2"));
  const int64_t H = gpt2.hidden;
  const SafetensorsTensor& c_attn = g.at("h.1.attn.c_attn.weight");
  const std::vector<float>& wk = gs.tensors.at("blocks.1.attn.wk.weight");  // [H out, H in]
  for (int64_t r : {0, 7, 31}) {
    for (int64_t col : {0, 5, 31}) EXPECT_EQ(wk[static_cast<size_t>(r * H + col)], at(c_attn, col, H + r));
  }
  HfFolderSpec qwen3;
  qwen3.model_type = "qwen3";
  qwen3.tied = true;
  const HfTensors q = testing::write_hf_folder_for_test(dir.path() / "qwen3", qwen3);
  const ModelState qs = read_model_file(dir.file("qwen3"));
  EXPECT_TRUE(qs.config.qk_norm);
  EXPECT_FALSE(qs.config.qkv_bias);
  EXPECT_TRUE(qs.config.tied_embeddings);
  EXPECT_EQ(qs.tensors.at("blocks.0.attn.k_norm.weight"), q.at("model.layers.0.self_attn.k_norm.weight").values);
  for (const std::string family : {"gpt2", "qwen3"}) {
    int code = 0;
    const std::string out = run_ndtrain("convert --from " + dir.file(family) + " --to-hf " + dir.file(family + "-out"), &code);
    ASSERT_EQ(code, 0) << out;
    testing::expect_same_state(read_model_file(dir.file(family)), read_model_file(dir.file(family + "-out")));
  }
  expect_same_tensors(g, folder_tensors(dir.path() / "gpt2-out"), "", "transformer.");
  expect_same_tensors(q, folder_tensors(dir.path() / "qwen3-out"));
}

// Catches: a slice read that reads the whole tensor, or the wrong rows/columns of a
// transposed (Conv1D) or fused tensor.
TEST(HfFolder, ABoxReadsOnlyItsBytes) {
  TempDir dir;
  HfFolderSpec spec;
  spec.model_type = "gpt2";
  spec.tied = true;
  testing::write_hf_folder_for_test(dir.path() / "gpt2", spec);
  const HfFolder folder = open_hf_folder(dir.file("gpt2"));
  const ModelState whole = read_hf_folder_model(folder);
  const int64_t H = spec.hidden;
  struct Case {
    std::string name;
    Shape offset, extent;
  };
  for (const Case& c : {Case{"blocks.0.attn.wv.weight", {8, 0}, {8, H}}, Case{"blocks.0.attn.wv.weight", {0, 16}, {H, 16}},
                        Case{"blocks.1.mlp.proj.weight", {3, 5}, {10, 7}}, Case{"blocks.1.attn.wq.bias", {4}, {12}},
                        Case{"wte.weight", {10, 0}, {20, H}}}) {
    SCOPED_TRACE(c.name);
    HfSliceReader reader(folder);
    std::vector<float> box(static_cast<size_t>(shape_numel(c.extent)));
    reader.read(c.name, c.offset, c.extent, box.data());
    EXPECT_EQ(reader.bytes_read(), box.size() * sizeof(float));
    const std::vector<float>& all = whole.tensors.at(c.name);
    const int64_t cols = c.extent.size() == 2 ? c.extent[1] : 1, width = c.extent.size() == 2 ? H : 1;
    const int64_t full_cols = c.name == "blocks.1.mlp.proj.weight" ? spec.ff : width;
    for (int64_t i = 0; i < static_cast<int64_t>(box.size()); ++i) {
      const int64_t r = c.offset[0] + i / cols, col = (c.extent.size() == 2 ? c.offset[1] : 0) + i % cols;
      ASSERT_EQ(box[static_cast<size_t>(i)], all[static_cast<size_t>(r * full_cols + col)]) << i;
    }
  }
}

// Catches: generate not taking a folder, or not looking for the folder's tokenizer.json
// (the test's is a stub the tokenizer loader refuses, naming it).
TEST(HfFolder, GenerateSamplesFromAFolderAndUsesItsTokenizer) {
  TempDir dir;
  HfFolderSpec spec;
  spec.model_type = "qwen3";
  testing::write_hf_folder_for_test(dir.path() / "m", spec);
  int code = 0;
  const std::string ids =
      run_ndtrain("generate --checkpoint " + dir.file("m") + " --prompt 1,2,3 --raw-tokens --tokens 4", &code);
  ASSERT_EQ(code, 0) << ids;
  EXPECT_EQ(std::count(ids.begin(), ids.end(), ','), 6) << ids;
  const std::string text = run_ndtrain("generate --checkpoint " + dir.file("m") + " --prompt hello", &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(text.find(dir.file("m") + "/tokenizer.json"), std::string::npos) << text;
}

// Catches: a model no transformers family expresses written as a folder that loads as
// another model; nothing may be left behind.
TEST(HfFolder, WritingRefusesWhatNoFamilyExpresses) {
  TempDir dir;
  ModelConfig gpt2_qk_norm = ModelConfig::preset("gpt2-tiny");
  gpt2_qk_norm.qk_norm = true;
  ModelConfig both = testing::llama_qk_norm();
  both.qkv_bias = true;
  const std::vector<std::pair<ModelConfig, std::string>> cases = {
      {ModelConfig::preset("llama-moe-tiny"), "model.n_experts = 8"},
      {gpt2_qk_norm, "model.qk_norm = true: transformers' GPT-2 has no QK-norm"},
      {both, "model.qk_norm and model.qkv_bias are both true"}};
  for (const auto& [config, message] : cases) {
    SCOPED_TRACE(message);
    expect_error([&] { write_hf_folder(testing::perturbed_state(config), dir.file("out"), DType::f32, 1 << 30, {}); },
                 {message});
    EXPECT_FALSE(fs::exists(dir.path() / "out"));
  }
}

// Edits a file of a written folder.
void edit_json(const fs::path& path, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(file_text(path));
  edit(j);
  testing::write_json(path, j);
}

// Catches: an unsupported family, a missing shard or tensor, a shape config.json does
// not make, or a rope scaling ndtrain does not compute read as something else.
TEST(HfFolder, BadFoldersAreNamed) {
  TempDir dir;
  const fs::path f = dir.path() / "m";
  auto fresh = [&] {
    fs::remove_all(f);
    testing::write_hf_folder_for_test(f, HfFolderSpec{});
  };
  auto read = [&] { read_model_file(f.string()); };
  fresh();
  edit_json(f / "config.json", [](nlohmann::json& j) { j["model_type"] = "mistral"; });
  expect_error(read, {"\"model_type\" = \"mistral\"", "gpt2, llama"});
  fresh();
  edit_json(f / "config.json", [](nlohmann::json& j) { j["architectures"] = {"Qwen2MoeForCausalLM"}; });
  expect_error(read, {"\"architectures\"", "Qwen2MoeForCausalLM"});
  fresh();
  edit_json(f / "config.json", [](nlohmann::json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; });
  expect_error(read, {"\"rope_scaling\"", "rope_type = \"yarn\""});
  fresh();
  fs::remove(f / "model-00002-of-00003.safetensors");
  expect_error(read, {"model-00002-of-00003.safetensors", "which is missing"});
  fresh();
  edit_json(f / "model.safetensors.index.json",
            [](nlohmann::json& j) { j["weight_map"].erase("model.layers.1.self_attn.k_proj.bias"); });
  expect_error(read, {"model.layers.1.self_attn.k_proj.bias", "is in no safetensors file"});
  fresh();
  edit_json(f / "config.json", [](nlohmann::json& j) { j["intermediate_size"] = 48; });
  expect_error(read, {"model.layers.0.mlp.down_proj.weight", "has shape [32, 40]", "config.json makes it [32, 48]"});
  fresh();
  edit_json(f / "config.json", [](nlohmann::json& j) { j["hidden_act"] = "gelu"; });
  expect_error(read, {"\"hidden_act\" = \"gelu\""});
}

}  // namespace
}  // namespace ndt
