// Writes a model as a Hugging Face model folder (interchange/hf_folder.h): config.json
// (interchange/hf_config.h), the tensors under Hugging Face names in model.safetensors or,
// when they exceed max_shard_bytes, in shards model-0000k-of-0000n.safetensors listed by
// model.safetensors.index.json (as transformers' save_pretrained with max_shard_size),
// and copies of the tokenizer files given. The folder loads back where it came from.
#pragma once

#include "core/dtype.h"
#include "interchange/model_state.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ndt {

// Tensors are packed into a shard in name order until the next would take it past
// max_shard_bytes (a tensor larger than that gets a shard of its own). `side_files` are
// copied under their own names (tokenizer.json, tokenizer_config.json, ...). Throws
// naming the folder, or the field config.json cannot express (hf_config_json), before
// anything is written; `dir` must not exist.
void write_hf_folder(const ModelState& state, const std::string& dir, DType dtype, uint64_t max_shard_bytes,
                     const std::vector<std::string>& side_files);

}  // namespace ndt
