// train.init_from: a run that starts from given weights instead of a random
// initialisation, on any layout, with fresh optimizer state at step 0 (fine-tuning).
#pragma once

#include "comm/device_mesh.h"
#include "model/config.h"
#include "parallel/data/gradient_sync.h"

#include <cstdint>
#include <string>

namespace ndt {

// Reads the model at `path` (train/model_source.h: safetensors, llm.c, a Hugging Face
// folder or a checkpoint) and copies into every parameter slice `sync` holds its box of
// the whole tensors: from a Hugging Face folder each rank reads only those boxes' bytes
// (interchange/hf_slice_reader.h), from the other formats the whole model. The
// model keys must describe the same model: every field of its description the file
// carries (train/model_source.h; ModelState::assumed are the run's), except moe_aux_loss
// and moe_z_loss (the new run's objective) and a llama model's max_seq_len (no position
// table); every difference is named.
// Returns the bytes of tensor data this rank read (from a whole-model format: the
// model's f32 size). Collective: applies nothing unless every rank read all of its slices.
uint64_t load_initial_weights(const std::string& path, const ModelConfig& model, GradientSync& sync, DeviceMesh& mesh);

}  // namespace ndt
