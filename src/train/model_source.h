// Where a whole model comes from when a user names a file: *.safetensors (Hugging
// Face names, interchange/hf_names.h), *.bin (an llm.c GPT-2 checkpoint,
// interchange/llmc.h), or else a checkpoint directory (train/model_checkpoint.h: a
// checkpoint, a folder of step-* checkpoints or a run folder, resolved to the latest).
// Shared by `ndtrain convert` and train.init_from.
#pragma once

#include "interchange/model_state.h"

#include <string>

namespace ndt {

enum class ModelFormat { safetensors, llmc, checkpoint };

// The format a path names: a directory is a checkpoint, else by extension. A path
// that does not exist yet (a destination) is a checkpoint unless its extension says
// otherwise. Throws for an existing file of another kind.
ModelFormat model_format_of(const std::string& path);
const char* model_format_name(ModelFormat format);

// Reads the whole model at `path` (n_head > 0: the number of heads, for safetensors
// without ndtrain metadata). Throws naming the path and what is wrong.
ModelState read_model_file(const std::string& path, int n_head = 0);

}  // namespace ndt
