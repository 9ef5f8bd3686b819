// Deterministic batches. The global batch of a step is a pure function of
// (seed, step): row b of step s starts at a token offset drawn from the counter-based
// RNG at (seed, "train-batch", s * B + b). A data-parallel rank asks for its rows of
// that same global batch, so any layout sees the same data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ndt {

// The tokens of one or more shards, read whole into memory and concatenated in the order
// given. Throws ndt::Error (from read_shard) for a missing or malformed shard, or if the
// list is empty.
class TokenDataset {
 public:
  explicit TokenDataset(const std::vector<std::string>& shard_paths);
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  const uint16_t* tokens() const { return tokens_.data(); }
  const std::vector<std::string>& paths() const { return paths_; }

 private:
  std::vector<std::string> paths_;
  std::vector<uint16_t> tokens_;
};

class BatchLoader {
 public:
  // B rows of T tokens per global batch. Throws if the dataset has fewer than T + 1
  // tokens (naming its shards), or if B or T is not positive, naming the sizes. Keeps a reference to `data`,
  // which must outlive the loader.
  BatchLoader(const TokenDataset& data, int B, int T, uint64_t seed);

  // Rows [row_begin, row_begin + rows) of the training batch of `step`: inputs and
  // targets are [rows, T] int32, targets shifted by one token. Row b (global index in the
  // batch) starts at off = v mod (size - T), where v = w1 << 32 | w0 are the first two
  // words of philox(seed, hash_name("train-batch"), step * B + b); so off is in
  // [0, size - T - 1], inputs = tokens[off, off + T) and targets = tokens[off + 1, off + T].
  // Requires step >= 0 and 0 <= row_begin, 0 <= rows, row_begin + rows <= B.
  void train_batch(int64_t step, int row_begin, int rows, int32_t* inputs, int32_t* targets) const;

  // Evaluation batch `index`: rows taken from consecutive, non-overlapping windows
  // of T + 1 tokens (wrapping at the end), independent of the seed. Row b reads global
  // window w = index * B + b, which starts at (w * T) mod (size - T): the input windows
  // tile the data, and (away from the wrap) a row's last target is the next row's first input.
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
