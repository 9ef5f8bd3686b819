#include "data/run_data.h"

#include "core/error.h"
#include "data/dataset_spec.h"
#include "data/tokenizer_record.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <set>

namespace ndt {

TextCodec::TextCodec(const std::string& tokenizer_path)
    : tokenizer_(std::make_shared<const tok::Tokenizer>(tok::load_tokenizer(tokenizer_path))), path_(tokenizer_path) {}

std::vector<int32_t> TextCodec::encode(const std::string& text) const {
  if (tokenizer_) return tokenizer_->encode(text);
  std::vector<int32_t> ids;
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string TextCodec::decode(const std::vector<int32_t>& ids) const {
  if (tokenizer_) return tokenizer_->decode(ids);
  std::string out;
  for (int32_t id : ids) out += static_cast<char>(id);
  return out;
}

std::string TextCodec::describe() const {
  return tokenizer_ ? fmt::format("{} {} (vocabulary {})", tokenizer_->kind(), path_, tokenizer_->vocab_size())
                    : std::string("byte-level");
}

namespace {

std::string shard_list(const std::string& value, const TokenDataset& d) {
  return d.paths().size() == 1 ? d.paths().front() : fmt::format("{} ({} shards)", value, d.paths().size());
}

}  // namespace

RunData::RunData(const DataSettings& settings, int B, int T, uint64_t seed) : settings_(settings) {
  std::vector<MixComponent> components;
  if (!settings.mix.empty()) {
    for (const MixSpec& m : parse_mix(settings.mix)) {
      train_sets_.push_back(std::make_unique<TokenDataset>(resolve_shards("data.mix path", m.path), settings.loss_mask));
      components.push_back({train_sets_.back().get(), m.weight, m.path});
    }
  } else {
    NDT_CHECK(!settings.train.empty(), "data.train is not set: give a token shard (see `ndtrain prepare`)");
    train_sets_.push_back(std::make_unique<TokenDataset>(resolve_shards("data.train", settings.train), settings.loss_mask));
    components.push_back({train_sets_.back().get(), 1.0, settings.train});
  }
  train_loader_ = std::make_unique<BatchLoader>(std::move(components), B, T, seed);
  if (!settings.val.empty()) val_set_ = std::make_unique<TokenDataset>(resolve_shards("data.val", settings.val), settings.loss_mask);
  val_loader_ = std::make_unique<BatchLoader>(val_set_ ? *val_set_ : *train_sets_.front(), B, T, seed);
  std::optional<std::string> tokenizer;
  if (!settings.tokenizer.empty()) tokenizer = settings.tokenizer;
  else tokenizer = recorded_tokenizer(train_sets_.front()->paths().front());
  if (tokenizer) codec_ = TextCodec(*tokenizer);
}

void RunData::check_vocab(int model_vocab) const {
  NDT_CHECK(codec_.vocab_size() <= model_vocab,
            "model.vocab_size = {} is smaller than the tokenizer's vocabulary {} ({}): its largest ids would index "
            "past the embedding", model_vocab, codec_.vocab_size(), codec_.describe());
  std::vector<std::pair<std::string, const TokenDataset*>> sets;
  for (const auto& s : train_sets_) sets.emplace_back(settings_.mix.empty() ? "data.train" : "data.mix path", s.get());
  if (val_set_) sets.emplace_back("data.val", val_set_.get());
  for (const auto& [key, set] : sets) {
    NDT_CHECK(set->vocab_size() <= model_vocab,
              "{} = \"{}\" records vocabulary size {} in its shard headers, more than model.vocab_size = {}", key,
              set->paths().front(), set->vocab_size(), model_vocab);
    set->scan([&](const int32_t* tokens, int64_t n, size_t shard, int64_t offset) {
      for (int64_t i = 0; i < n; ++i) {
        NDT_CHECK(tokens[i] >= 0 && tokens[i] < model_vocab,
                  "{} = \"{}\": token {} at position {} is outside model.vocab_size = {}", key, set->paths()[shard],
                  static_cast<uint32_t>(tokens[i]), offset + i, model_vocab);
      }
    });
  }
}

void RunData::pack_documents(int32_t separator) {
  train_loader_->pack_documents(separator);
  val_loader_->pack_documents(separator);
}

int32_t RunData::recorded_separator() const {
  std::vector<const TokenDataset*> sets;
  for (const auto& s : train_sets_) sets.push_back(s.get());
  if (val_set_) sets.push_back(val_set_.get());
  std::optional<int32_t> separator;
  std::string first;
  std::set<std::filesystem::path> folders;  // each read once
  for (const TokenDataset* set : sets) {
    for (const std::string& shard : set->paths()) {
      if (!folders.insert(std::filesystem::path(shard).parent_path()).second) continue;
      const std::optional<int32_t> recorded = ndt::recorded_separator(shard);
      NDT_CHECK(recorded.has_value(),
                "data.document_boundaries = true needs the token that starts a document, and data.document_separator "
                "= -1 takes the one `ndtrain prepare --tokenizer` records beside the shards, but the folder of {} "
                "holds no {} (byte-level shards record none): set data.document_separator to the separator's id",
                shard, kTokenizerRecordFile);
      NDT_CHECK(!separator || *separator == *recorded,
                "data.document_boundaries: the shards disagree on the document separator: {} records token {}, {} "
                "token {}; set data.document_separator",
                first, *separator, shard, *recorded);
      if (!separator) separator = recorded, first = shard;
    }
  }
  return *separator;
}

double RunData::unigram_entropy() const {
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (const auto& s : train_sets_) {
    s->scan([&](const int32_t* tokens, int64_t n, size_t, int64_t) {
      for (int64_t i = 0; i < n; ++i) {
        const auto t = static_cast<size_t>(tokens[i]);
        if (t >= counts.size()) counts.resize(t + 1, 0);
        ++counts[t];
      }
      total += n;
    });
  }
  double h = 0;
  for (int64_t c : counts) {
    if (c > 0) {
      const double p = static_cast<double>(c) / static_cast<double>(total);
      h -= p * std::log(p);
    }
  }
  return h;
}

std::string RunData::describe() const {
  std::string line;
  if (settings_.mix.empty()) {
    line = fmt::format("data: {} training tokens from {}", train_sets_.front()->size(),
                       shard_list(settings_.train, *train_sets_.front()));
  } else {
    std::vector<std::string> parts;
    double total = 0;
    for (const MixComponent& c : train_loader_->components()) total += c.weight;
    for (const MixComponent& c : train_loader_->components()) {
      parts.push_back(fmt::format("{} ({} tokens, weight {:.3f})", c.name, c.data->size(), c.weight / total));
    }
    line = fmt::format("data: a blend of {}", fmt::join(parts, ", "));
  }
  line += val_set_ ? fmt::format(", {} validation tokens from {}", val_set_->size(), shard_list(settings_.val, *val_set_))
                   : std::string(", validation on training data");
  return line + fmt::format("\ntext: {}", codec_.describe());
}

nlohmann::json RunData::mix_record(int64_t steps) const {
  nlohmann::json out = nlohmann::json::array();
  if (settings_.mix.empty()) return out;
  const std::vector<double> realised = train_loader_->realised_mix(steps);
  double total = 0;
  for (const MixComponent& c : train_loader_->components()) total += c.weight;
  for (size_t i = 0; i < realised.size(); ++i) {
    const MixComponent& c = train_loader_->components()[i];
    out.push_back({{"path", c.name}, {"weight", c.weight / total}, {"realised", realised[i]}});
  }
  return out;
}

}  // namespace ndt
