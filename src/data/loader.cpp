#include "data/loader.h"

#include "core/error.h"
#include "core/rng.h"
#include "core/targets.h"
#include "data/packed_rows.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

namespace ndt {

namespace {
const uint64_t kTrainBatchStream = hash_name("train-batch");
const uint64_t kMixChoiceStream = hash_name("mix-choice");
}  // namespace

BatchLoader::BatchLoader(const TokenDataset& data, int B, int T, uint64_t seed)
    : BatchLoader(std::vector<MixComponent>{{&data, 1.0, ""}}, B, T, seed) {}

BatchLoader::BatchLoader(std::vector<MixComponent> components, int B, int T, uint64_t seed)
    : components_(std::move(components)), B_(B), T_(T), seed_(seed) {
  NDT_CHECK(B > 0 && T > 0, "batch size B = {} and sequence length T = {} must be positive", B, T);
  NDT_CHECK(!components_.empty(), "a data mix needs at least one dataset");
  double total = 0;
  for (const MixComponent& c : components_) {
    NDT_CHECK(std::isfinite(c.weight) && c.weight > 0, "data.mix: the weight of {} is {}: weights must be positive",
              c.name, c.weight);
    NDT_CHECK(c.data->size() >= static_cast<int64_t>(T) + 1,
              "token shard {} holds {} tokens, fewer than the sequence length + 1 = {} needed for one row",
              fmt::join(c.data->paths(), " + "), c.data->size(), static_cast<int64_t>(T) + 1);
    total += c.weight;
  }
  double sum = 0;
  for (const MixComponent& c : components_) cumulative_.push_back((sum += c.weight) / total);
  cumulative_.back() = 1.0;
}

static void check_rows(const char* what, int row_begin, int rows, int B) {
  NDT_CHECK(row_begin >= 0 && rows >= 0 && static_cast<int64_t>(row_begin) + rows <= B,
            "{}: rows [{}, {}) are not within the batch of B = {} rows", what, row_begin,
            static_cast<int64_t>(row_begin) + rows, B);
}

void BatchLoader::read_row(const RowSource& row, int32_t* window, uint8_t* mask) const {
  if (!packed_.empty()) {
    packed_[row.component]->fill(row.start, window, mask);
    return;
  }
  const TokenDataset& data = *components_[row.component].data;
  data.copy(row.start, T_ + 1, window);
  if (data.has_masks()) {
    data.copy_masks(row.start, T_ + 1, mask);
  } else {
    std::fill(mask, mask + T_ + 1, uint8_t{1});
  }
}

void BatchLoader::copy_row(const RowSource& row, int32_t* inputs, int32_t* targets) const {
  thread_local std::vector<int32_t> window;
  thread_local std::vector<uint8_t> mask;
  window.resize(static_cast<size_t>(T_) + 1);
  mask.resize(window.size());
  read_row(row, window.data(), mask.data());
  std::copy(window.begin(), window.end() - 1, inputs);
  // Target t is token t + 1 of the row: the mask byte of that token says if it counts.
  for (size_t t = 0; t < static_cast<size_t>(T_); ++t) targets[t] = mask[t + 1] ? window[t + 1] : kIgnoredTarget;
}

int64_t BatchLoader::counted_targets(const RowSource& row) const {
  if (!components_[row.component].data->has_masks()) return T_;
  thread_local std::vector<int32_t> window;
  thread_local std::vector<uint8_t> mask;
  window.resize(static_cast<size_t>(T_) + 1);
  mask.resize(window.size());
  read_row(row, window.data(), mask.data());
  return std::count(mask.begin() + 1, mask.end(), uint8_t{1});
}

void BatchLoader::pack_documents(int32_t separator) {
  packed_.clear();
  for (const MixComponent& c : components_) packed_.push_back(std::make_unique<DocumentIndex>(*c.data, separator, T_));
}

int64_t BatchLoader::too_long_documents() const {
  int64_t n = 0;
  for (const auto& index : packed_) n += index->too_long();
  return n;
}

int64_t BatchLoader::documents() const {
  int64_t n = 0;
  for (const auto& index : packed_) n += index->count();
  return n;
}

size_t BatchLoader::component_of(int64_t step, int b) const {
  if (components_.size() == 1) return 0;
  const uint64_t counter = static_cast<uint64_t>(step) * static_cast<uint64_t>(B_) + static_cast<uint64_t>(b);
  const auto words = philox(seed_, kMixChoiceStream, counter);
  const double u = static_cast<double>((static_cast<uint64_t>(words[1]) << 32 | words[0]) >> 11) * 0x1.0p-53;
  return static_cast<size_t>(std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin());
}

std::vector<double> BatchLoader::realised_mix(int64_t steps) const {
  std::vector<double> counts(components_.size(), 0.0);
  for (int64_t s = 0; s < steps; ++s) {
    for (int b = 0; b < B_; ++b) counts[component_of(s, b)] += 1;
  }
  const double rows = static_cast<double>(std::max<int64_t>(steps, 1)) * B_;
  for (double& c : counts) c /= rows;
  return counts;
}

BatchLoader::RowSource BatchLoader::train_row(int64_t step, int b) const {
  const size_t c = component_of(step, b);
  const uint64_t counter = static_cast<uint64_t>(step) * static_cast<uint64_t>(B_) + b;
  const auto words = philox(seed_, kTrainBatchStream, counter);
  const uint64_t value = (static_cast<uint64_t>(words[1]) << 32) | words[0];
  if (!packed_.empty()) return {c, static_cast<int64_t>(value % static_cast<uint64_t>(packed_[c]->count()))};
  // Start offsets are uniform in [0, size - T - 1], so the targets' last token exists.
  const uint64_t range = static_cast<uint64_t>(components_[c].data->size() - T_);
  return {c, static_cast<int64_t>(value % range)};
}

BatchLoader::RowSource BatchLoader::eval_row(int64_t index, int b) const {
  const unsigned __int128 w = static_cast<unsigned __int128>(index) * B_ + b;
  // Packed: global row w starts at document w (wrapping).
  if (!packed_.empty()) return {0, static_cast<int64_t>(w % static_cast<uint64_t>(packed_[0]->count()))};
  // Global window w starts at w * T: windows of T + 1 tokens that share only their edge token
  // (one window's last target is the next window's first input), wrapping modulo size - T.
  const unsigned __int128 range = static_cast<uint64_t>(components_.front().data->size() - T_);
  return {0, static_cast<int64_t>((w * static_cast<unsigned>(T_)) % range)};
}

void BatchLoader::train_batch(int64_t step, int row_begin, int rows, int32_t* inputs,
                              int32_t* targets) const {
  NDT_CHECK(step >= 0, "train_batch: step must be >= 0, got {}", step);
  check_rows("train_batch", row_begin, rows, B_);
  for (int r = 0; r < rows; ++r) {
    copy_row(train_row(step, row_begin + r), inputs + static_cast<int64_t>(r) * T_,
             targets + static_cast<int64_t>(r) * T_);
  }
}

void BatchLoader::eval_batch(int64_t index, int row_begin, int rows, int32_t* inputs,
                             int32_t* targets) const {
  NDT_CHECK(index >= 0, "eval_batch: index must be >= 0, got {}", index);
  check_rows("eval_batch", row_begin, rows, B_);
  for (int r = 0; r < rows; ++r) {
    copy_row(eval_row(index, row_begin + r), inputs + static_cast<int64_t>(r) * T_,
             targets + static_cast<int64_t>(r) * T_);
  }
}

int64_t BatchLoader::train_targets(int64_t step) const {
  NDT_CHECK(step >= 0, "train_targets: step must be >= 0, got {}", step);
  int64_t count = 0;
  for (int b = 0; b < B_; ++b) count += counted_targets(train_row(step, b));
  return count;
}

int64_t BatchLoader::eval_targets(int64_t index) const {
  NDT_CHECK(index >= 0, "eval_targets: index must be >= 0, got {}", index);
  int64_t count = 0;
  for (int b = 0; b < B_; ++b) count += counted_targets(eval_row(index, b));
  return count;
}

}  // namespace ndt
