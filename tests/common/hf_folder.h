// A Hugging Face model folder made the way transformers' save_pretrained lays one out,
// written by the test itself (not by ndtrain's writer): config.json with the family's
// own field names, the tensors under the family's names and layouts in safetensors
// shards listed by model.safetensors.index.json (or one model.safetensors), and a
// tokenizer.json. Values are distinct per tensor and element, so a misplaced slice shows.
#pragma once

#include "core/rng.h"
#include "interchange/safetensors.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace ndt::testing {

struct HfFolderSpec {
  std::string model_type = "qwen2";  // gpt2, llama, qwen2 (q/k/v bias), qwen3 (QK-norm)
  int vocab = 72, hidden = 32, layers = 2, heads = 4, kv_heads = 2, ff = 40, positions = 64;
  bool tied = false;
  bool llama3_scaling = false;  // rope_scaling {"rope_type": "llama3", ...}
  int shards = 3;               // 1: model.safetensors without an index
};

using HfTensors = std::map<std::string, SafetensorsTensor>;

// Norm weights near 1, everything else near 0.
inline void add_hf_tensor(HfTensors& t, const std::string& name, Shape shape) {
  SafetensorsTensor& x = t[name];
  x.shape = shape;
  x.values.resize(static_cast<size_t>(shape_numel(shape)));
  const bool norm = name.find("norm") != std::string::npos || name.find("ln_") != std::string::npos;
  for (size_t i = 0; i < x.values.size(); ++i) x.values[i] = 0.05f * normal_at(11, hash_name(name), i) + (norm ? 1.0f : 0.0f);
}

// The GPT-2 tensors under the published checkpoint's names (no "transformer." prefix).
inline HfTensors gpt2_hf_tensors(const HfFolderSpec& s) {
  HfTensors t;
  const int64_t H = s.hidden, F = s.ff;
  add_hf_tensor(t, "wte.weight", {s.vocab, H});
  add_hf_tensor(t, "wpe.weight", {s.positions, H});
  for (int l = 0; l < s.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    for (const char* ln : {"ln_1", "ln_2"}) {
      add_hf_tensor(t, h + ln + ".weight", {H});
      add_hf_tensor(t, h + ln + ".bias", {H});
    }
    add_hf_tensor(t, h + "attn.c_attn.weight", {H, 3 * H});  // Conv1D: [in, out], out = q|k|v
    add_hf_tensor(t, h + "attn.c_attn.bias", {3 * H});
    add_hf_tensor(t, h + "attn.c_proj.weight", {H, H});
    add_hf_tensor(t, h + "attn.c_proj.bias", {H});
    add_hf_tensor(t, h + "mlp.c_fc.weight", {H, F});
    add_hf_tensor(t, h + "mlp.c_fc.bias", {F});
    add_hf_tensor(t, h + "mlp.c_proj.weight", {F, H});
    add_hf_tensor(t, h + "mlp.c_proj.bias", {H});
  }
  add_hf_tensor(t, "ln_f.weight", {H});
  add_hf_tensor(t, "ln_f.bias", {H});
  return t;
}

inline HfTensors llama_family_hf_tensors(const HfFolderSpec& s) {
  HfTensors t;
  const int64_t H = s.hidden, F = s.ff, D = s.hidden / s.heads, KV = s.kv_heads * D;
  add_hf_tensor(t, "model.embed_tokens.weight", {s.vocab, H});
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add_hf_tensor(t, p + "input_layernorm.weight", {H});
    add_hf_tensor(t, p + "post_attention_layernorm.weight", {H});
    add_hf_tensor(t, p + "self_attn.q_proj.weight", {H, H});
    add_hf_tensor(t, p + "self_attn.k_proj.weight", {KV, H});
    add_hf_tensor(t, p + "self_attn.v_proj.weight", {KV, H});
    add_hf_tensor(t, p + "self_attn.o_proj.weight", {H, H});
    if (s.model_type == "qwen2") {
      add_hf_tensor(t, p + "self_attn.q_proj.bias", {H});
      add_hf_tensor(t, p + "self_attn.k_proj.bias", {KV});
      add_hf_tensor(t, p + "self_attn.v_proj.bias", {KV});
    }
    if (s.model_type == "qwen3") {
      add_hf_tensor(t, p + "self_attn.q_norm.weight", {D});
      add_hf_tensor(t, p + "self_attn.k_norm.weight", {D});
    }
    add_hf_tensor(t, p + "mlp.gate_proj.weight", {F, H});
    add_hf_tensor(t, p + "mlp.up_proj.weight", {F, H});
    add_hf_tensor(t, p + "mlp.down_proj.weight", {H, F});
  }
  add_hf_tensor(t, "model.norm.weight", {H});
  if (!s.tied) add_hf_tensor(t, "lm_head.weight", {s.vocab, H});
  return t;
}

inline nlohmann::json hf_config_of(const HfFolderSpec& s) {
  static const std::map<std::string, std::string> arch = {{"gpt2", "GPT2LMHeadModel"}, {"llama", "LlamaForCausalLM"},
                                                          {"qwen2", "Qwen2ForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"}};
  nlohmann::json j = {{"architectures", {arch.at(s.model_type)}}, {"model_type", s.model_type},
                      {"vocab_size", s.vocab}, {"tie_word_embeddings", s.tied}, {"torch_dtype", "float32"}};
  if (s.model_type == "gpt2") {
    j.update({{"n_embd", s.hidden}, {"n_layer", s.layers}, {"n_head", s.heads}, {"n_inner", s.ff},
              {"n_positions", s.positions}, {"n_ctx", s.positions}, {"layer_norm_epsilon", 1e-5},
              {"activation_function", "gelu_new"}});
    return j;
  }
  j.update({{"hidden_size", s.hidden}, {"intermediate_size", s.ff}, {"num_hidden_layers", s.layers},
            {"num_attention_heads", s.heads}, {"num_key_value_heads", s.kv_heads},
            {"max_position_embeddings", s.positions}, {"rms_norm_eps", 1e-6}, {"rope_theta", 500000.0},
            {"hidden_act", "silu"}, {"rope_scaling", nullptr}});
  if (s.model_type == "qwen3") j["head_dim"] = s.hidden / s.heads;
  if (s.llama3_scaling) {
    j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 16}};
  }
  return j;
}

inline void write_json(const std::filesystem::path& path, const nlohmann::json& j) {
  std::ofstream(path) << j.dump(2);
}

// Writes the folder into `dir` (created) and returns its tensors by Hugging Face name.
inline HfTensors write_hf_folder_for_test(const std::filesystem::path& dir, const HfFolderSpec& s) {
  std::filesystem::create_directories(dir);
  const HfTensors tensors = s.model_type == "gpt2" ? gpt2_hf_tensors(s) : llama_family_hf_tensors(s);
  write_json(dir / "config.json", hf_config_of(s));
  write_json(dir / "tokenizer.json", {{"version", "1.0"}, {"model", {{"type", "BPE"}}}});
  if (s.shards == 1) {
    write_safetensors((dir / "model.safetensors").string(), SafetensorsFile{tensors, {{"format", "pt"}}});
    return tensors;
  }
  std::vector<SafetensorsFile> files(static_cast<size_t>(s.shards));
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  auto shard_name = [&](size_t k) {
    return "model-0000" + std::to_string(k + 1) + "-of-0000" + std::to_string(s.shards) + ".safetensors";
  };
  size_t i = 0;
  for (const auto& [name, t] : tensors) {  // round robin: every shard holds parts of every layer
    const size_t shard = i++ % files.size();
    files[shard].tensors[name] = t;
    index["weight_map"][name] = shard_name(shard);
  }
  for (size_t k = 0; k < files.size(); ++k) {
    files[k].metadata["format"] = "pt";
    write_safetensors((dir / shard_name(k)).string(), files[k]);
  }
  write_json(dir / "model.safetensors.index.json", index);
  return tensors;
}

}  // namespace ndt::testing
