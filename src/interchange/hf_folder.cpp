#include "interchange/hf_folder.h"

#include "core/error.h"
#include "interchange/hf_config.h"
#include "interchange/hf_names.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <vector>

namespace ndt {

namespace fs = std::filesystem;

namespace {

constexpr const char* kIndex = "model.safetensors.index.json";
constexpr const char* kSingle = "model.safetensors";

// The index's weight_map: tensor name -> shard file name.
std::map<std::string, std::string> read_weight_map(const fs::path& index) {
  std::ifstream in(index);
  NDT_CHECK(in, "cannot open {}", index.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{} is not valid JSON: {}", index.string(), e.what());
  }
  NDT_CHECK(j.is_object() && j.contains("weight_map") && j.at("weight_map").is_object(),
            "{} has no \"weight_map\" object", index.string());
  std::map<std::string, std::string> map;
  for (const auto& [name, file] : j.at("weight_map").items()) {
    NDT_CHECK(file.is_string(), "{}: weight_map[\"{}\"] = {} is not a file name", index.string(), name, file.dump());
    map[name] = file.get<std::string>();
  }
  return map;
}

// Every tensor of the folder's safetensors files with the file holding it.
std::map<std::string, HfTensorFile> read_headers(const fs::path& folder) {
  std::map<std::string, HfTensorFile> tensors;
  if (!fs::exists(folder / kIndex)) {
    const fs::path single = folder / kSingle;
    NDT_CHECK(fs::exists(single), "Hugging Face folder {} has neither {} nor {}", folder.string(), kSingle, kIndex);
    for (auto& [name, entry] : read_safetensors_header(single.string()).tensors) {
      tensors[name] = {single.string(), entry};
    }
    return tensors;
  }
  const std::map<std::string, std::string> weight_map = read_weight_map(folder / kIndex);
  std::map<std::string, SafetensorsHeader> shards;
  for (const auto& [name, file] : weight_map) {
    const fs::path shard = folder / file;
    if (!shards.count(file)) {
      NDT_CHECK(fs::exists(shard), "Hugging Face folder {}: {} puts {} in shard {}, which is missing", folder.string(),
                kIndex, name, file);
      shards[file] = read_safetensors_header(shard.string());
    }
    const auto it = shards[file].tensors.find(name);
    NDT_CHECK(it != shards[file].tensors.end(), "Hugging Face folder {}: {} puts {} in shard {}, which does not hold it",
              folder.string(), kIndex, name, file);
    tensors[name] = {shard.string(), it->second};
  }
  return tensors;
}

// Buffers some files carry that are no parameters: GPT-2's causal masks, old Llama's
// rotary inverse frequencies; and the output layer a tied model does not use.
bool ignored_tensor(const std::string& name, const ModelConfig& c) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
         name.ends_with(".rotary_emb.inv_freq") || (c.tied_embeddings && name == "lm_head.weight");
}

}  // namespace

bool is_hf_folder(const std::string& path) {
  return fs::is_directory(path) && fs::exists(fs::path(path) / "config.json");
}

HfFolder open_hf_folder(const std::string& path) {
  HfFolder folder;
  folder.path = path;
  folder.config = read_hf_config((fs::path(path) / "config.json").string());
  std::map<std::string, HfTensorFile> found = read_headers(path);
  const bool gpt2 = folder.config.arch == Arch::gpt2;
  folder.gpt2_prefix = gpt2 && found.count("wte.weight") && !found.count("transformer.wte.weight") ? "" : "transformer.";
  for (const auto& [name, shape] : hf_file_shapes(folder.config, folder.gpt2_prefix)) {
    auto node = found.extract(name);
    NDT_CHECK(!node.empty(), "Hugging Face folder {}: tensor {} is in no safetensors file of the folder", path, name);
    const HfTensorFile& t = node.mapped();
    NDT_CHECK(t.entry.shape == shape, "Hugging Face folder {}: tensor {} has shape {} in {}, but config.json makes it {}",
              path, name, shape_str(t.entry.shape), fs::path(t.file).filename().string(), shape_str(shape));
    folder.tensors[name] = t;
  }
  std::vector<std::string> extra;
  for (const auto& [name, t] : found) {
    if (!ignored_tensor(name, folder.config)) extra.push_back(name);
  }
  NDT_CHECK(extra.empty(), "Hugging Face folder {}: tensors config.json has no place for: {}", path,
            fmt::join(extra, ", "));
  return folder;
}

}  // namespace ndt
