// Deterministic batches. The global batch of a step is a pure function of
// (seed, step): row b of step s starts at a token offset drawn from the counter-based
// RNG at (seed, "train-batch", s * B + b). A data-parallel rank asks for its rows of
// that same global batch, so any layout sees the same data, and a resumed run the same
// sequence. With a blend of datasets (data.mix), the row first picks its dataset from
// (seed, "mix-choice", s * B + b) by the weights, then its offset in that dataset as above.
#pragma once

#include "data/dataset.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ndt {

// One dataset of a blend and its share of the rows (weights are normalised).
struct MixComponent {
  const TokenDataset* data = nullptr;
  double weight = 1;
  std::string name;  // for messages and reports
};

class BatchLoader {
 public:
  // B rows of T tokens per global batch. Throws if the dataset has fewer than T + 1
  // tokens (naming its shards), or if B or T is not positive, naming the sizes. Keeps a reference to `data`,
  // which must outlive the loader.
  BatchLoader(const TokenDataset& data, int B, int T, uint64_t seed);
  // A blend: each row from component c with probability weight_c / sum of weights. Throws
  // for an empty list, a weight that is not positive and finite, or a component too small.
  BatchLoader(std::vector<MixComponent> components, int B, int T, uint64_t seed);

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
  // A blend evaluates on its first component.
  void eval_batch(int64_t index, int row_begin, int rows, int32_t* inputs, int32_t* targets) const;

  // The component row b of step s reads (0 without a blend).
  size_t component_of(int64_t step, int b) const;
  // The fraction of the rows of steps [0, steps) each component gave (a pure function).
  std::vector<double> realised_mix(int64_t steps) const;
  const std::vector<MixComponent>& components() const { return components_; }

  int B() const { return B_; }
  int T() const { return T_; }

 private:
  void copy_window(const TokenDataset& data, int64_t start, int32_t* inputs, int32_t* targets) const;
  std::vector<MixComponent> components_;
  std::vector<double> cumulative_;  // normalised cumulative weights
  int B_, T_;
  uint64_t seed_;
};

}  // namespace ndt
