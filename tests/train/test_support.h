// Synthetic text for the training tests.
#pragma once

#include "core/rng.h"
#include "data/shard.h"
#include "../common/temp_dir.h"

#include <vector>

namespace ndt::testing {

// A byte stream with structure to learn: words from a small vocabulary in an
// RNG-chosen order, separated by spaces.
inline std::vector<uint16_t> synthetic_text(int64_t n, uint64_t seed) {
  static const char* words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat ", "and ", "dog ", "ran "};
  std::vector<uint16_t> out;
  for (uint64_t i = 0; static_cast<int64_t>(out.size()) < n; ++i) {
    for (const char* ch = words[philox(seed, 11, i)[0] % 9]; *ch; ++ch) out.push_back(static_cast<unsigned char>(*ch));
  }
  out.resize(n);
  return out;
}

}  // namespace ndt::testing
