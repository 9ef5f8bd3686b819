#include "data/prepare_tokens.h"

#include "core/error.h"
#include "core/rng.h"
#include "data/prepare_source.h"
#include "data/shard_series.h"
#include "data/tokenizer_record.h"
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <omp.h>

#include <chrono>
#include <filesystem>
#include <thread>

namespace fs = std::filesystem;

namespace ndt {

namespace {

const uint64_t kValSplitStream = hash_name("prepare-val-split");

void check_outputs(const TokenPrepareOptions& o) {
  NDT_CHECK(o.val_fraction >= 0 && o.val_fraction < 1, "prepare --val-fraction {} must be in [0, 1)", o.val_fraction);
  NDT_CHECK(o.shard_tokens >= 2, "prepare --shard-tokens {} must be at least 2", o.shard_tokens);
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  NDT_CHECK(!ec && fs::is_directory(o.out_dir), "cannot create output folder {}", o.out_dir);
  if (o.overwrite) return;
  for (const auto& e : fs::directory_iterator(o.out_dir)) {
    const std::string name = e.path().filename().string();
    NDT_CHECK(!(name.rfind("train_", 0) == 0 || name.rfind("val_", 0) == 0 || name == kTokenizerRecordFile),
              "prepare: {} already holds shards ({}): not overwriting them without --force", o.out_dir, name);
  }
}

class Progress {
 public:
  Progress(std::ostream* out, int64_t total_bytes) : out_(out), total_(total_bytes) {}
  void update(int64_t bytes, int64_t tokens, size_t shards, bool last) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (!out_ || (!last && s - shown_ < 1.0)) return;
    shown_ = s;
    const double rate = s > 0 ? static_cast<double>(bytes) / s : 0;
    const double eta = rate > 0 ? static_cast<double>(std::max<int64_t>(total_ - bytes, 0)) / rate : 0;
    fmt::print(*out_, "\rprepare: {:.1f} of {:.1f} MB, {:.1f} MB/s, {} tokens, {} shards, ETA {:.0f} s   {}",
               static_cast<double>(bytes) / 1e6, static_cast<double>(total_) / 1e6, rate / 1e6, tokens, shards, eta,
               last ? "\n" : "");
    out_->flush();
  }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  std::ostream* out_;
  int64_t total_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double shown_ = -1;
};

// Encodes a batch of units on the threads, then adds them to the splits in input order.
void encode_batch(const PrepareSource& source, std::vector<PrepareUnit>& units,
                  std::vector<std::unique_ptr<tok::TokenEncoder>>& encoders, int32_t separator, double val_fraction,
                  ShardSeries& train, ShardSeries& val, TokenPrepareResult& r) {
  std::vector<std::vector<int32_t>> ids(units.size());
  std::vector<std::vector<uint8_t>> masks(units.size());
#pragma omp parallel for num_threads(static_cast<int>(encoders.size())) schedule(dynamic, 1)
  for (size_t i = 0; i < units.size(); ++i) {
    source.encode(units[i], *encoders[static_cast<size_t>(omp_get_thread_num())], ids[i], masks[i]);
  }
  for (size_t i = 0; i < units.size(); ++i, ++r.documents) {
    const auto w = philox(0, kValSplitStream, static_cast<uint64_t>(r.documents));
    const bool to_val = static_cast<double>(w[0]) / 4294967296.0 < val_fraction;
    (to_val ? val : train).add(ids[i], masks[i], separator);
    r.val_documents += to_val;
  }
}

}  // namespace

TokenPrepareResult prepare_token_shards(const std::vector<std::string>& files, const TokenPrepareOptions& o) {
  NDT_CHECK(!files.empty(), "prepare: the list of input files is empty");
  const tok::Tokenizer tokenizer = tok::load_tokenizer(o.tokenizer);
  const std::optional<int32_t> sep =
      o.separator.empty() ? tokenizer.eos_id() : tokenizer.token_id(o.separator);
  NDT_CHECK(sep.has_value(), "prepare: tokenizer {} has {}: give the document separator with --separator TOKEN",
            o.tokenizer, o.separator.empty() ? "no EOS token it names" : fmt::format("no token \"{}\"", o.separator));
  NDT_CHECK(o.format == "text" || o.format == "chat" || o.format == "prompt-response",
            "prepare --format {} is not an input format: text, chat or prompt-response", o.format);
  PrepareSource source(files, o, tokenizer);
  check_outputs(o);
  int64_t total_bytes = 0;
  for (const std::string& f : files) total_bytes += static_cast<int64_t>(fs::file_size(f));
  const bool wide = tokenizer.vocab_size() > 65536;
  ShardSeries train(o.out_dir, "train", o.shard_tokens, wide, tokenizer.vocab_size(), source.masked());
  ShardSeries val(o.out_dir, "val", o.shard_tokens, wide, tokenizer.vocab_size(), source.masked());
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::unique_ptr<tok::TokenEncoder>> encoders;
  for (int t = 0; t < threads; ++t) encoders.push_back(std::make_unique<tok::TokenEncoder>(tokenizer));
  TokenPrepareResult r;
  r.chat_template = source.describe_template();
  Progress progress(o.progress, total_bytes);
  std::vector<PrepareUnit> units;
  constexpr size_t kBatchBytesPerThread = 1 << 20;
  for (bool more = true; more;) {
    units.clear();
    size_t batch_bytes = 0, bytes = 0;
    PrepareUnit unit;
    while (batch_bytes < kBatchBytesPerThread * static_cast<size_t>(threads) && (more = source.next(unit, bytes))) {
      batch_bytes += bytes;
      units.push_back(std::move(unit));
    }
    encode_batch(source, units, encoders, *sep, o.val_fraction, train, val, r);
    progress.update(source.bytes_read(), train.tokens() + val.tokens(), train.shards().size() + val.shards().size(),
                    false);
  }
  train.finish();
  val.finish();
  progress.update(source.bytes_read(), train.tokens() + val.tokens(), train.shards().size() + val.shards().size(), true);
  NDT_CHECK(train.tokens() >= 2 && (o.val_fraction == 0 || val.tokens() >= 2),
            "prepare: {} documents ({} bytes) split into {} training and {} validation tokens with --val-fraction {}: "
            "each part needs at least 2 tokens (more documents, or another fraction)",
            r.documents, source.bytes_read(), train.tokens(), val.tokens(), o.val_fraction);
  r.dtype = wide ? "uint32" : "uint16";
  write_tokenizer_record(o.out_dir, tokenizer, *sep, r.dtype);
  r.train_shards = train.shards(), r.val_shards = val.shards();
  r.train_tokens = train.tokens(), r.val_tokens = val.tokens();
  r.counted_tokens = train.counted() + val.counted();
  r.bytes = source.bytes_read();
  r.seconds = progress.seconds();
  return r;
}

}  // namespace ndt
