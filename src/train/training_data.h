// A run's data: the training and validation shards, checked before step 1 (every token
// must index the embedding), and the batches the steps read. The batch of step s is the
// loader's batch at data position s + offset, where the offset counts the batches a
// rollback skipped (docs/stability.md): so the data is a function of (seed, position)
// on any layout and after any resume, and a skipped window stays skipped.
#pragma once

#include "data/loader.h"
#include "train/config.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace ndt {

class TrainingData {
 public:
  // Reads data.train and data.val (the training data validates when data.val is
  // empty); throws naming the key, the file and the first bad token.
  explicit TrainingData(const RunConfig& config);

  const TokenDataset& train() const { return train_; }
  const TokenDataset* val() const { return val_.get(); }

  // The data position of step `step` (0-based).
  int64_t position(int64_t step) const { return step + offset_; }
  // Rows [row_begin, row_begin + rows) of the training batch at data position `position`.
  void train_rows(int64_t position, int row_begin, int rows, int32_t* inputs, int32_t* targets) const;
  // Rows of validation batch `index` (train.eval_batches of them per evaluation).
  void eval_rows(int64_t index, int row_begin, int rows, int32_t* inputs, int32_t* targets) const;

  // From step `step` on, the data is `count` batches further on.
  void skip(int64_t step, int64_t count);
  int64_t skipped_total() const { return offset_; }
  // Training batches skipped so far, as (first data position, count).
  const std::vector<std::pair<int64_t, int64_t>>& skipped() const { return skipped_; }

  // In state["stability"]: the offset and the skipped windows (restored on resume only).
  void save(nlohmann::json& state) const;
  void restore(const nlohmann::json& state);

 private:
  TokenDataset train_;
  std::unique_ptr<TokenDataset> val_;
  BatchLoader train_loader_, val_loader_;
  int64_t offset_ = 0;
  std::vector<std::pair<int64_t, int64_t>> skipped_;
};

// Natural-log entropy of the token frequencies (the loss of the best unigram model).
double unigram_entropy(const uint16_t* tokens, int64_t n);

}  // namespace ndt
