#include "data/loader.h"

#include "core/error.h"
#include "core/rng.h"
#include "data/shard.h"

#include <fmt/ranges.h>

namespace ndt {

namespace {
const uint64_t kTrainBatchStream = hash_name("train-batch");
}  // namespace

TokenDataset::TokenDataset(const std::vector<std::string>& shard_paths) : paths_(shard_paths) {
  NDT_CHECK(!shard_paths.empty(), "TokenDataset: no shard paths given");
  for (const std::string& path : shard_paths) {
    std::vector<uint16_t> shard = read_shard(path);
    if (tokens_.empty()) {
      tokens_ = std::move(shard);
    } else {
      tokens_.insert(tokens_.end(), shard.begin(), shard.end());
    }
  }
}

BatchLoader::BatchLoader(const TokenDataset& data, int B, int T, uint64_t seed)
    : data_(data), B_(B), T_(T), seed_(seed) {
  NDT_CHECK(B > 0 && T > 0, "batch size B = {} and sequence length T = {} must be positive", B, T);
  NDT_CHECK(data.size() >= static_cast<int64_t>(T) + 1,
            "token shard {} holds {} tokens, fewer than the sequence length + 1 = {} needed for one row",
            fmt::join(data.paths(), " + "), data.size(), static_cast<int64_t>(T) + 1);
}

static void check_rows(const char* what, int row_begin, int rows, int B) {
  NDT_CHECK(row_begin >= 0 && rows >= 0 && static_cast<int64_t>(row_begin) + rows <= B,
            "{}: rows [{}, {}) are not within the batch of B = {} rows", what, row_begin,
            static_cast<int64_t>(row_begin) + rows, B);
}

void BatchLoader::copy_window(int64_t start, int32_t* inputs, int32_t* targets) const {
  const uint16_t* tok = data_.tokens() + start;
  for (int t = 0; t < T_; ++t) {
    inputs[t] = tok[t];
    targets[t] = tok[t + 1];
  }
}

void BatchLoader::train_batch(int64_t step, int row_begin, int rows, int32_t* inputs,
                              int32_t* targets) const {
  NDT_CHECK(step >= 0, "train_batch: step must be >= 0, got {}", step);
  check_rows("train_batch", row_begin, rows, B_);
  // Start offsets are uniform in [0, size - T - 1], so the targets' last token exists.
  const uint64_t range = static_cast<uint64_t>(data_.size() - T_);
  for (int r = 0; r < rows; ++r) {
    const int b = row_begin + r;
    const uint64_t counter = static_cast<uint64_t>(step) * static_cast<uint64_t>(B_) + b;
    const auto words = philox(seed_, kTrainBatchStream, counter);
    const uint64_t value = (static_cast<uint64_t>(words[1]) << 32) | words[0];
    const int64_t start = static_cast<int64_t>(value % range);
    copy_window(start, inputs + static_cast<int64_t>(r) * T_, targets + static_cast<int64_t>(r) * T_);
  }
}

void BatchLoader::eval_batch(int64_t index, int row_begin, int rows, int32_t* inputs,
                             int32_t* targets) const {
  NDT_CHECK(index >= 0, "eval_batch: index must be >= 0, got {}", index);
  check_rows("eval_batch", row_begin, rows, B_);
  const unsigned __int128 range = static_cast<uint64_t>(data_.size() - T_);
  for (int r = 0; r < rows; ++r) {
    // Global window w starts at w * T: windows of T + 1 tokens that share only their edge token
    // (one window's last target is the next window's first input), wrapping modulo size - T.
    const unsigned __int128 w = static_cast<unsigned __int128>(index) * B_ + (row_begin + r);
    const int64_t start = static_cast<int64_t>((w * static_cast<unsigned>(T_)) % range);
    copy_window(start, inputs + static_cast<int64_t>(r) * T_, targets + static_cast<int64_t>(r) * T_);
  }
}

}  // namespace ndt
