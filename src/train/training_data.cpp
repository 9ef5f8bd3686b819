#include "train/training_data.h"

#include "core/error.h"

#include <fmt/format.h>

namespace ndt {

TrainingData::TrainingData(const RunConfig& c)
    : data_(DataSettings{c.train_data, c.val_data, c.data_mix, c.tokenizer, c.loss_mask}, c.batch_size, c.seq_len, c.seed) {
  data_.check_vocab(c.model.vocab_size);
  if (!c.document_boundaries) return;
  recorded_ = c.document_separator < 0;
  separator_ = recorded_ ? data_.recorded_separator() : c.document_separator;
  NDT_CHECK(*separator_ < c.model.vocab_size,
            "data.document_boundaries: the shards' recorded separator {} is outside model.vocab_size = {}", *separator_,
            c.model.vocab_size);
  if (c.loss_mask) data_.pack_documents(*separator_);
}

std::string TrainingData::describe_documents() const {
  if (!separator_) return "";
  std::string line = fmt::format("documents: attention and positions restart at each token {} ({:?}; {}), the first "
                                 "token of its document",
                                 *separator_, text().decode({*separator_}),
                                 recorded_ ? "recorded beside the shards" : "data.document_separator");
  const BatchLoader& train = data_.train();
  if (train.documents() == 0) return line;
  line += fmt::format("; rows packed from whole documents (data.loss_mask), {} of them", train.documents());
  if (train.too_long_documents() > 0) {
    line += fmt::format("; warning: {} are longer than a row (train.seq_len + 1 = {} tokens) and are cut to it",
                        train.too_long_documents(), train.T() + 1);
  }
  return line;
}

void TrainingData::train_rows(int64_t position, int row_begin, int rows, int32_t* inputs, int32_t* targets) const {
  data_.train().train_batch(position, row_begin, rows, inputs, targets);
}

void TrainingData::eval_rows(int64_t index, int row_begin, int rows, int32_t* inputs, int32_t* targets) const {
  data_.val().eval_batch(index, row_begin, rows, inputs, targets);
}

void TrainingData::skip(int64_t step, int64_t count) {
  NDT_CHECK(count >= 0, "skip_batches: {} batches", count);
  if (count == 0) return;
  skipped_.emplace_back(position(step), count);
  offset_ += count;
}

void TrainingData::save(nlohmann::json& state) const {
  nlohmann::json windows = nlohmann::json::array();
  for (const auto& [first, count] : skipped_) windows.push_back({first, count});
  state["stability"]["batch_offset"] = offset_;
  state["stability"]["skipped_batches"] = windows;
}

void TrainingData::restore(const nlohmann::json& state) {
  if (!state.contains("stability")) return;  // saved before the stability state existed
  const nlohmann::json& st = state.at("stability");
  offset_ = st.at("batch_offset").get<int64_t>();
  skipped_.clear();
  for (const nlohmann::json& w : st.at("skipped_batches")) skipped_.emplace_back(w.at(0), w.at(1));
}

}  // namespace ndt
