// Deterministic batches. The global batch of a step is a pure function of
// (seed, step): row b of step s starts at a token offset drawn from the counter-based
// RNG at (seed, "train-batch", s * B + b). A data-parallel rank asks for its rows of
// that same global batch, so any layout sees the same data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ndt {

// The tokens of one or more shards, concatenated in the order given.
class TokenDataset {
 public:
  explicit TokenDataset(const std::vector<std::string>& shard_paths);
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  const uint16_t* tokens() const { return tokens_.data(); }

 private:
  std::vector<uint16_t> tokens_;
};

class BatchLoader {
 public:
  // B rows of T tokens per global batch. Throws if the dataset has fewer than T + 1
  // tokens, naming the sizes.
  BatchLoader(const TokenDataset& data, int B, int T, uint64_t seed);

  // Rows [row_begin, row_begin + rows) of the training batch of `step`: inputs and
  // targets are [rows, T] int32, targets shifted by one token.
  void train_batch(int64_t step, int row_begin, int rows, int32_t* inputs, int32_t* targets) const;

  // Evaluation batch `index`: rows taken from consecutive, non-overlapping windows
  // of T + 1 tokens (wrapping at the end), independent of the seed.
  void eval_batch(int64_t index, int row_begin, int rows, int32_t* inputs, int32_t* targets) const;

  int B() const { return B_; }
  int T() const { return T_; }

 private:
  void copy_window(int64_t start, int32_t* inputs, int32_t* targets) const;
  const TokenDataset& data_;
  int B_, T_;
  uint64_t seed_;
};

}  // namespace ndt
