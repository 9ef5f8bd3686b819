// llm.c GPT-2 checkpoints (the fp32 gpt2_124M.bin that llm.c's train_gpt2.py writes):
// a header of 256 int32 [magic 20240326, version 3, maxT, V, L, NH, C, Vp, 0, ...] then
// every parameter as fp32, grouped by kind across layers (all layers' ln1 weights, then
// all ln1 biases, ...; a layer's qkv weight is its q rows, then k rows, then v rows),
// each [out, in] row-major as in ndtrain. wte has Vp >= V rows; the padding rows are
// dropped on load and written as zeros on save.
#pragma once

#include "interchange/model_state.h"

#include <string>

namespace ndt {

inline constexpr int32_t kLlmcMagic = 20240326;
inline constexpr int32_t kLlmcVersion = 3;
inline constexpr int kLlmcHeaderInts = 256;

// A gpt2 config (d_ff = 4 C, tied embeddings, norm_eps 1e-5) and its parameters. Throws
// ndt::Error naming the file for a truncated header, bad magic or version (value and
// expected), an invalid config, or a size that is not the header's parameter count.
ModelState load_llmc(const std::string& path);

// padded_vocab = 0: vocab_size rounded up to a multiple of 128. Throws for a config
// llm.c cannot express (not gpt2, untied, d_ff != 4 d_model, qk_norm, norm_eps != 1e-5),
// or naming the file and the reason if it cannot be written; written atomically, so
// the path holds the whole file or nothing.
void save_llmc(const ModelState& state, const std::string& path, int padded_vocab = 0);

}  // namespace ndt
