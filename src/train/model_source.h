// Where a whole model comes from when a user names a file: *.safetensors (Hugging
// Face names, interchange/hf_names.h), *.bin (an llm.c GPT-2 checkpoint,
// interchange/llmc.h), a directory with a config.json (a Hugging Face model folder,
// interchange/hf_folder.h), or else a checkpoint directory (train/model_checkpoint.h: a
// checkpoint, a folder of step-* checkpoints or a run folder, resolved to the latest).
// Shared by `ndtrain convert` and train.init_from.
#pragma once

#include "interchange/model_state.h"

#include <optional>
#include <string>

namespace ndt {

enum class ModelFormat { safetensors, llmc, hf_folder, checkpoint };

// The format a path names: a directory with config.json is a Hugging Face folder, another
// directory a checkpoint, else by extension. A path
// that does not exist yet (a destination) is a checkpoint folder unless its extension
// names another model file format (.pt, .pth, .ckpt, .gguf, .onnx, ...: model.pt is not
// a folder to create). Throws for an existing file of another kind and for those.
ModelFormat model_format_of(const std::string& path);
const char* model_format_name(ModelFormat format);

// Reads the whole model at `path`. `hint` supplies what a safetensors file without
// ndtrain metadata cannot carry (n_head, norm_eps, ...; listed in the state's
// `assumed`); none: such a file is refused. Throws naming the path and what is wrong.
ModelState read_model_file(const std::string& path, const std::optional<ModelConfig>& hint = std::nullopt);

}  // namespace ndt
