// The benchmarks' data: synthetic tokens, a function of their index in the global batch
// alone (input token i = row x T + position is philox(7, "bench", i) mod vocab, its
// target token i + 1), so every layout and rank count trains on the same tokens.
#pragma once

#include "core/rng.h"
#include "train/training_model.h"

#include <cstdint>

namespace ndt {

inline FetchRows synthetic_rows(int T, int vocab) {
  return [T, vocab](int row_begin, int rows, int32_t* inputs, int32_t* targets) {
    const uint64_t first = static_cast<uint64_t>(row_begin) * static_cast<uint64_t>(T);
    const uint64_t n = static_cast<uint64_t>(rows) * static_cast<uint64_t>(T);
    auto token = [vocab](uint64_t i) { return static_cast<int32_t>(philox(7, hash_name("bench"), i)[0] % vocab); };
    for (uint64_t i = 0; i < n; ++i) {
      inputs[i] = token(first + i);
      targets[i] = token(first + i + 1);
    }
  };
}

}  // namespace ndt
