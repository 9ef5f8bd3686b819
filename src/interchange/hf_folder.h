// A Hugging Face model folder as transformers saves one: config.json
// (interchange/hf_config.h), the weights as model.safetensors or as shards listed by
// model.safetensors.index.json ({"weight_map": {tensor: shard file}}), and the
// tokenizer (tokenizer.json, with tokenizer_config.json and generation_config.json
// beside it). Opening reads config.json, the index and each shard's header only; the
// tensors stay on disk until a slice of them is read (interchange/hf_slice_reader.h).
#pragma once

#include "interchange/safetensors.h"
#include "model/config.h"

#include <map>
#include <string>

namespace ndt {

// Whether `path` is a directory holding a config.json (a Hugging Face model folder).
bool is_hf_folder(const std::string& path);

struct HfTensorFile {
  std::string file;  // the shard's path
  SafetensorsEntry entry;
};

struct HfFolder {
  std::string path;
  ModelConfig config;         // from config.json
  std::string gpt2_prefix;    // "transformer." or "" (GPT2Model names, as the published gpt2 folder)
  std::map<std::string, HfTensorFile> tensors;  // every tensor of the config, by Hugging Face name
};

// Opens `path`. Throws ndt::Error naming the folder and: config.json's problem
// (read_hf_config), a shard the index names that is missing, a tensor of the config that
// no shard holds (or that the index puts in a shard without it), a tensor whose shape
// disagrees with config.json (both shapes), or tensors the config has no place for.
HfFolder open_hf_folder(const std::string& path);

}  // namespace ndt
