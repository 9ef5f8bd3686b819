// Whole models in the checkpoint format (checkpoint/): read the parameters of a
// training or model-only checkpoint into a ModelState, write a ModelState as a
// one-rank model-only checkpoint, and find a checkpoint from a path a user typed.
// The convention shared with the trainer: parameters are saved under their ndtrain
// names (model_parameter_specs) with their logical shapes, AdamW moments under
// optim.exp_avg.<name> / optim.exp_avg_sq.<name> (training checkpoints only; not read
// here), and the commit state holds "kind" ("model" or "training"), "step" and
// "model": config_fields(config).
#pragma once

#include "checkpoint/reader.h"
#include "interchange/model_state.h"

#include <cstdint>
#include <filesystem>
#include <string>

namespace ndt {

// The model a checkpoint describes (its state "model", config_from_fields). A
// description without n_experts (written before MoE settings were saved) that sits
// beside MoE parameters is refused naming model.n_experts, rather than read as dense.
ModelConfig saved_model_config(const ckpt::CheckpointReader& reader, const std::filesystem::path& dir);

// The config from state "model" and every parameter whole. Throws ndt::Error naming
// the directory and what is missing (metadata.json, the model config or a field of
// it, a parameter), or a parameter saved with another shape.
ModelState read_model_checkpoint(const std::filesystem::path& dir);

// Writes `state` as a committed checkpoint at `dir` (rank 0 holds every tensor as one
// block), staged in `dir`.tmp, with state {"kind": "model", "step": step, "model": ...}.
// Throws if `dir` already exists, the state does not match its config, or a value is
// not finite (naming the tensor and element).
void write_model_checkpoint(const ModelState& state, const std::filesystem::path& dir, int64_t step = 0);

// `path` itself when it holds metadata.json; else the latest committed checkpoint in
// `path` (a folder of step-* checkpoints) or in `path`/checkpoints (a run folder).
// Throws naming the path when it does not exist or holds no checkpoint.
std::filesystem::path resolve_checkpoint(const std::string& path);

}  // namespace ndt
