// llm.c GPT-2 checkpoints (gpt2_124M.bin and gpt2_124M_bf16.bin as llm.c's
// train_gpt2.py writes them): a header of 256 int32 [magic 20240326, version, maxT, V,
// L, NH, C, Vp, 0, ...] then every parameter, as fp32 (version 3) or bf16 (version 5),
// grouped by kind across layers (all layers' ln1 weights, then all ln1 biases, ...; a
// layer's qkv weight is its q rows, then k rows, then v rows), each [out, in] row-major
// as in ndtrain. wte has Vp >= V rows; the padding rows are dropped on load and written
// as zeros on save.
#pragma once

#include "core/dtype.h"
#include "interchange/model_state.h"

#include <string>

namespace ndt {

inline constexpr int32_t kLlmcMagic = 20240326;
inline constexpr int32_t kLlmcVersionF32 = 3;   // fp32 parameters
inline constexpr int32_t kLlmcVersionBf16 = 5;  // bf16 parameters
inline constexpr int kLlmcHeaderInts = 256;

// The header version that stores parameters as `dtype`: f32 -> 3, bf16 -> 5; throws
// naming the dtype and the supported ones otherwise.
int32_t llmc_version(DType dtype);

// A gpt2 config (d_ff = 4 C, tied embeddings, norm_eps 1e-5) and its parameters (bf16
// widened to f32 exactly). Throws ndt::Error naming the file for a truncated header,
// bad magic or a version other than 3 and 5 (value and the supported ones), an invalid
// config, or a size that is not the header's parameter count at the version's width.
ModelState load_llmc(const std::string& path);

// padded_vocab = 0: vocab_size rounded up to a multiple of 128. dtype f32 writes
// version 3, bf16 version 5 (values rounded to nearest even). Throws for another dtype,
// for a config llm.c cannot express (a mixture of experts, not gpt2, untied,
// d_ff != 4 d_model, qk_norm, norm_eps != 1e-5), for a value that is not finite or that
// bf16 cannot hold, or naming the file and the reason if it cannot be written; written
// atomically, so the path holds the whole file or nothing.
void save_llmc(const ModelState& state, const std::string& path, int padded_vocab = 0,
               DType dtype = DType::f32);

}  // namespace ndt
