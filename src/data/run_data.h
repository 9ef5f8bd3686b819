// The data of a training run, from the [data] settings: the training set (data.train,
// or the blend data.mix), the validation set (data.val; else the training set), their
// loaders, and the text codec that turns the sample prompt into tokens and tokens into
// text (the tokenizer of data.tokenizer, or the one recorded beside the training shards,
// or bytes). The trainer keeps one and asks it for batches, checks and reports.
#pragma once

#include "data/dataset.h"
#include "data/loader.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ndt {

// The [data] settings' text, as the config holds them.
struct DataSettings {
  std::string train, val, mix, tokenizer;
  bool loss_mask = false;  // data.loss_mask: every shard's mask is loaded and masks its targets
};

// Text to tokens and back: a tokenizer's, or one token per byte (vocabulary 256).
class TextCodec {
 public:
  TextCodec() = default;  // bytes
  explicit TextCodec(const std::string& tokenizer_path);
  std::vector<int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  int32_t vocab_size() const { return tokenizer_ ? tokenizer_->vocab_size() : 256; }
  std::string describe() const;  // "byte-level" or the tokenizer's kind and file
  const tok::Tokenizer* tokenizer() const { return tokenizer_.get(); }

 private:
  std::shared_ptr<const tok::Tokenizer> tokenizer_;
  std::string path_;
};

class RunData {
 public:
  // Resolves and maps every shard (errors name the setting), loads the tokenizer.
  RunData(const DataSettings& settings, int B, int T, uint64_t seed);

  const BatchLoader& train() const { return *train_loader_; }
  const BatchLoader& val() const { return *val_loader_; }
  const TextCodec& text() const { return codec_; }

  // Before step 1: every token of every shard below model.vocab_size (the error names the
  // setting, the shard, the position and the token), shards' recorded vocabularies and the
  // tokenizer's within it (naming both sizes).
  void check_vocab(int model_vocab) const;
  // data.document_boundaries with data.document_separator = -1: the separator recorded
  // beside every training and validation shard (each folder's tokenizer_info.json).
  // Throws naming both settings when a folder has none, or naming both records when two
  // record different separators.
  int32_t recorded_separator() const;
  // data.loss_mask with data.document_boundaries: rows of whole documents from now on
  // (data/packed_rows.h), training and validation.
  void pack_documents(int32_t separator);
  double unigram_entropy() const;  // nats per token of the training data (one pass over it)
  std::string describe() const;    // the run header's data line(s)
  // data.mix: each dataset's weight and the fraction of rows it gave over `steps` steps.
  nlohmann::json mix_record(int64_t steps) const;

 private:
  DataSettings settings_;
  std::vector<std::unique_ptr<TokenDataset>> train_sets_;  // one, or one per data.mix entry
  std::unique_ptr<TokenDataset> val_set_;
  std::unique_ptr<BatchLoader> train_loader_, val_loader_;
  TextCodec codec_;
};

}  // namespace ndt
