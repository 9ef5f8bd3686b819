// A run's data as the steps read it: the [data] settings' shards, blend and text codec
// (data/run_data.h), checked before step 1 (every token must index the embedding), and
// the data position of each step. The batch of step s is the loader's batch at data
// position s + offset, where the offset counts the batches a rollback skipped
// (docs/stability.md): so the data is a function of (seed, position) on any layout and
// after any resume, and a skipped window stays skipped.
#pragma once

#include "data/run_data.h"
#include "train/config.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ndt {

class TrainingData {
 public:
  // Maps data.train (or data.mix) and data.val (the training data validates when
  // data.val is empty) and checks their tokens against model.vocab_size; throws naming
  // the setting, the file and the first bad token. With data.document_boundaries it
  // finds the document separator (data.document_separator, else the shards' record;
  // throws naming both settings when there is none), and with data.loss_mask too, packs
  // rows from whole documents (data/packed_rows.h: a row never splits a conversation).
  explicit TrainingData(const RunConfig& config);

  const RunData& data() const { return data_; }
  const TextCodec& text() const { return data_.text(); }
  // The token that starts a document under data.document_boundaries; nullopt when off.
  std::optional<int32_t> document_separator() const { return separator_; }
  // The run header's line on documents ("" when off), warning of documents cut to a row.
  std::string describe_documents() const;

  // The data position of step `step` (0-based).
  int64_t position(int64_t step) const { return step + offset_; }
  // Rows [row_begin, row_begin + rows) of the training batch at data position `position`.
  void train_rows(int64_t position, int row_begin, int rows, int32_t* inputs, int32_t* targets) const;
  // The targets of the whole training batch at `position` that count in the loss (B x T
  // without data.loss_mask; data/loader.h), and of validation batch `index`.
  int64_t train_targets(int64_t position) const { return data_.train().train_targets(position); }
  int64_t eval_targets(int64_t index) const { return data_.val().eval_targets(index); }
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
  RunData data_;
  std::optional<int32_t> separator_;
  bool recorded_ = false;  // the separator came from the shards' record
  int64_t offset_ = 0;
  std::vector<std::pair<int64_t, int64_t>> skipped_;
};

}  // namespace ndt
