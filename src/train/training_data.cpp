#include "train/training_data.h"

#include "core/error.h"

#include <cmath>

namespace ndt {

namespace {

// Every token of a shard must index the embedding: checked before step 1, not when the
// bad row is first drawn (for validation data: at the first evaluation, hours in).
void check_tokens(const TokenDataset& data, const char* key, const std::string& path, int vocab_size) {
  const uint16_t* tokens = data.tokens();
  for (int64_t i = 0; i < data.size(); ++i) {
    NDT_CHECK(tokens[i] < vocab_size, "{} = \"{}\": token {} at position {} is outside model.vocab_size = {}", key,
              path, tokens[i], i, vocab_size);
  }
}

const TokenDataset& checked(const TokenDataset& data, const char* key, const std::string& path, int vocab_size) {
  check_tokens(data, key, path, vocab_size);
  return data;
}

std::unique_ptr<TokenDataset> validation_data(const RunConfig& c) {
  if (c.val_data.empty()) return nullptr;
  auto data = std::make_unique<TokenDataset>(std::vector<std::string>{c.val_data});
  check_tokens(*data, "data.val", c.val_data, c.model.vocab_size);
  return data;
}

}  // namespace

TrainingData::TrainingData(const RunConfig& c)
    : train_({c.train_data}),
      val_(validation_data(c)),
      train_loader_(checked(train_, "data.train", c.train_data, c.model.vocab_size), c.batch_size, c.seq_len, c.seed),
      val_loader_(val_ ? *val_ : train_, c.batch_size, c.seq_len, c.seed) {}

void TrainingData::train_rows(int64_t position, int row_begin, int rows, int32_t* inputs, int32_t* targets) const {
  train_loader_.train_batch(position, row_begin, rows, inputs, targets);
}

void TrainingData::eval_rows(int64_t index, int row_begin, int rows, int32_t* inputs, int32_t* targets) const {
  val_loader_.eval_batch(index, row_begin, rows, inputs, targets);
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

double unigram_entropy(const uint16_t* tokens, int64_t n) {
  std::vector<int64_t> counts(65536, 0);
  for (int64_t i = 0; i < n; ++i) ++counts[tokens[i]];
  double h = 0;
  for (int64_t c : counts) {
    if (c > 0) {
      const double p = static_cast<double>(c) / static_cast<double>(n);
      h -= p * std::log(p);
    }
  }
  return h;
}

}  // namespace ndt
