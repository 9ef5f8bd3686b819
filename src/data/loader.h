// Deterministic batches. The global batch of a step is a pure function of
// (seed, step): row b of step s starts at a token offset drawn from the counter-based
// RNG at (seed, "train-batch", s * B + b). A data-parallel rank asks for its rows of
// that same global batch, so any layout sees the same data, and a resumed run the same
// sequence. With a blend of datasets (data.mix), the row first picks its dataset from
// (seed, "mix-choice", s * B + b) by the weights, then its offset in that dataset as above.
// A dataset with loss masks (data/loss_mask.h) masks the targets of its rows.
#pragma once

#include "data/dataset.h"
#include "data/packed_rows.h"

#include <cstdint>
#include <memory>
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

  // The targets of the whole training batch of `step` (all B rows) that count in the loss:
  // B x T without loss masks, else those whose mask byte is 1. Every rank computes it
  // from the data alone (a few bytes a row), so it needs no communication.
  int64_t train_targets(int64_t step) const;
  // The same for evaluation batch `index`.
  int64_t eval_targets(int64_t index) const;

  // From now on rows are packed from whole documents (data/packed_rows.h): row b of step s
  // starts at document v mod (documents) of its component, v drawn as for a window's
  // start; evaluation row w at document w mod (documents). Every component needs masks.
  void pack_documents(int32_t separator);
  int64_t documents() const;           // over the components (0 unless packed)
  int64_t too_long_documents() const;  // documents cut to a row (0 unless packed)

  // The component row b of step s reads (0 without a blend).
  size_t component_of(int64_t step, int b) const;
  // The fraction of the rows of steps [0, steps) each component gave (a pure function).
  std::vector<double> realised_mix(int64_t steps) const;
  const std::vector<MixComponent>& components() const { return components_; }

  int B() const { return B_; }
  int T() const { return T_; }

 private:
  // Where a row's T + 1 tokens come from: the window at token `start` of a component, or
  // (packed) the row from its document `start`.
  struct RowSource {
    size_t component;
    int64_t start;
  };
  RowSource train_row(int64_t step, int b) const;
  RowSource eval_row(int64_t index, int b) const;
  // The row's T + 1 tokens and mask bytes (all 1 without masks).
  void read_row(const RowSource& row, int32_t* window, uint8_t* mask) const;
  // Inputs and targets of a row; a target whose token's mask byte is 0 becomes
  // kIgnoredTarget (core/targets.h).
  void copy_row(const RowSource& row, int32_t* inputs, int32_t* targets) const;
  int64_t counted_targets(const RowSource& row) const;
  std::vector<MixComponent> components_;
  std::vector<double> cumulative_;  // normalised cumulative weights
  std::vector<std::unique_ptr<DocumentIndex>> packed_;  // one per component when packing, else none
  int B_, T_;
  uint64_t seed_;
};

}  // namespace ndt
