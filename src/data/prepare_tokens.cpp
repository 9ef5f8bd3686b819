#include "data/prepare_tokens.h"

#include "core/error.h"
#include "core/rng.h"
#include "data/documents.h"
#include "data/shard.h"
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

// One split's shards: tokens buffered up to shard_tokens, then written as one shard.
class ShardSeries {
 public:
  ShardSeries(std::string dir, std::string prefix, int64_t shard_tokens, bool wide, int32_t vocab)
      : dir_(std::move(dir)), prefix_(std::move(prefix)), shard_tokens_(shard_tokens), wide_(wide), vocab_(vocab) {}
  void add(const std::vector<int32_t>& ids, int32_t separator) {
    push(separator);
    for (int32_t id : ids) push(id);
  }
  void finish() {
    if (!buffer_.empty()) flush();
  }
  const std::vector<std::string>& shards() const { return shards_; }
  int64_t tokens() const { return tokens_; }

 private:
  void push(int32_t id) {
    buffer_.push_back(static_cast<uint32_t>(id));
    ++tokens_;
    if (static_cast<int64_t>(buffer_.size()) == shard_tokens_) flush();
  }
  void flush() {
    const std::string path = (fs::path(dir_) / fmt::format("{}_{:06d}.bin", prefix_, shards_.size())).string();
    if (wide_) {
      write_shard_u32(path, buffer_, vocab_);
    } else {
      write_shard(path, std::vector<uint16_t>(buffer_.begin(), buffer_.end()), vocab_);
    }
    shards_.push_back(path);
    buffer_.clear();
  }
  std::string dir_, prefix_;
  int64_t shard_tokens_;
  bool wide_;
  int32_t vocab_;
  std::vector<uint32_t> buffer_;
  std::vector<std::string> shards_;
  int64_t tokens_ = 0;
};

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

}  // namespace

TokenPrepareResult prepare_token_shards(const std::vector<std::string>& files, const TokenPrepareOptions& o) {
  NDT_CHECK(!files.empty(), "prepare: the list of input files is empty");
  const tok::Tokenizer tokenizer = tok::load_tokenizer(o.tokenizer);
  const std::optional<int32_t> sep =
      o.separator.empty() ? tokenizer.eos_id() : tokenizer.token_id(o.separator);
  NDT_CHECK(sep.has_value(), "prepare: tokenizer {} has {}: give the document separator with --separator TOKEN",
            o.tokenizer, o.separator.empty() ? "no EOS token it names" : fmt::format("no token \"{}\"", o.separator));
  DocumentReader reader(files, o.documents, o.jsonl_field);
  check_outputs(o);
  int64_t total_bytes = 0;
  for (const std::string& f : files) total_bytes += static_cast<int64_t>(fs::file_size(f));
  const bool wide = tokenizer.vocab_size() > 65536;
  ShardSeries train(o.out_dir, "train", o.shard_tokens, wide, tokenizer.vocab_size());
  ShardSeries val(o.out_dir, "val", o.shard_tokens, wide, tokenizer.vocab_size());
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::unique_ptr<tok::TokenEncoder>> encoders;
  for (int t = 0; t < threads; ++t) encoders.push_back(std::make_unique<tok::TokenEncoder>(tokenizer));
  const tok::EncodeOptions encode{.added_tokens = o.special_in_text, .post_process = false};
  TokenPrepareResult r;
  Progress progress(o.progress, total_bytes);
  std::vector<std::string> docs;
  std::vector<std::vector<int32_t>> ids;
  constexpr size_t kBatchBytesPerThread = 1 << 20;
  for (bool more = true; more;) {
    docs.clear();
    size_t batch_bytes = 0;
    std::string doc;
    while (batch_bytes < kBatchBytesPerThread * static_cast<size_t>(threads) && (more = reader.next(doc))) {
      batch_bytes += doc.size();
      docs.push_back(std::move(doc));
    }
    ids.resize(docs.size());
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (size_t i = 0; i < docs.size(); ++i) {
      ids[i].clear();
      encoders[static_cast<size_t>(omp_get_thread_num())]->encode(docs[i], ids[i], encode);
    }
    for (size_t i = 0; i < docs.size(); ++i, ++r.documents) {
      const auto w = philox(0, kValSplitStream, static_cast<uint64_t>(r.documents));
      const bool to_val = static_cast<double>(w[0]) / 4294967296.0 < o.val_fraction;
      (to_val ? val : train).add(ids[i], *sep);
      r.val_documents += to_val;
    }
    progress.update(reader.bytes_read(), train.tokens() + val.tokens(), train.shards().size() + val.shards().size(),
                    false);
  }
  train.finish();
  val.finish();
  progress.update(reader.bytes_read(), train.tokens() + val.tokens(), train.shards().size() + val.shards().size(), true);
  NDT_CHECK(train.tokens() >= 2 && (o.val_fraction == 0 || val.tokens() >= 2),
            "prepare: {} documents ({} bytes) split into {} training and {} validation tokens with --val-fraction {}: "
            "each part needs at least 2 tokens (more documents, or another fraction)",
            r.documents, reader.bytes_read(), train.tokens(), val.tokens(), o.val_fraction);
  r.dtype = wide ? "uint32" : "uint16";
  write_tokenizer_record(o.out_dir, tokenizer, *sep, r.dtype);
  r.train_shards = train.shards(), r.val_shards = val.shards();
  r.train_tokens = train.tokens(), r.val_tokens = val.tokens();
  r.bytes = reader.bytes_read();
  r.seconds = progress.seconds();
  return r;
}

}  // namespace ndt
