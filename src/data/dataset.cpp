#include "data/dataset.h"

#include "core/error.h"
#include "core/mapped_file.h"
#include "data/loss_mask.h"
#include "data/shard.h"

#include <algorithm>
#include <cstring>

namespace ndt {

// One shard mapped read-only.
class MappedShard {
 public:
  explicit MappedShard(const std::string& path)
      : header_(read_shard_header(path)),
        file_(path, kShardHeaderBytes + static_cast<size_t>(header_.tokens) * header_.token_bytes()) {}
  const ShardHeader& header() const { return header_; }

  void copy(int64_t begin, int64_t n, int32_t* out) const {
    const size_t offset = kShardHeaderBytes + static_cast<size_t>(begin) * header_.token_bytes();
    const uint8_t* p = file_.data() + offset;
    if (header_.token_bytes() == 2) {
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        out[i] = v;
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        uint32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        out[i] = static_cast<int32_t>(v);
      }
    }
    file_.release(offset, static_cast<size_t>(n) * header_.token_bytes());
  }

 private:
  ShardHeader header_;
  MappedFile file_;
};

TokenDataset::TokenDataset(const std::vector<std::string>& shard_paths, bool with_masks) : paths_(shard_paths) {
  NDT_CHECK(!shard_paths.empty(), "TokenDataset: no shard paths given");
  std::string vocab_from;
  for (const std::string& path : shard_paths) {
    shards_.push_back(std::make_unique<MappedShard>(path));
    const ShardHeader& h = shards_.back()->header();
    if (with_masks) masks_.push_back(std::make_unique<MaskFile>(mask_path(path), path, h.tokens));
    begin_.push_back(size_);
    size_ += h.tokens;
    if (h.vocab_size == 0) continue;
    NDT_CHECK(vocab_size_ == 0 || vocab_size_ == h.vocab_size,
              "shards of one dataset hold different vocabularies: {} records vocabulary size {}, {} records {}",
              vocab_from, vocab_size_, path, h.vocab_size);
    vocab_size_ = h.vocab_size, vocab_from = path;
  }
}

TokenDataset::~TokenDataset() = default;
TokenDataset::TokenDataset(TokenDataset&&) noexcept = default;

bool TokenDataset::wide() const {
  return std::any_of(shards_.begin(), shards_.end(), [](const auto& s) { return s->header().token_bytes() == 4; });
}

template <typename T, typename Copy>
void TokenDataset::for_each_piece(int64_t start, int64_t n, T* out, const Copy& copy) const {
  NDT_CHECK(start >= 0 && n >= 0 && start + n <= size_, "TokenDataset: tokens [{}, {}) are outside [0, {})", start,
            start + n, size_);
  size_t s = static_cast<size_t>(std::upper_bound(begin_.begin(), begin_.end(), start) - begin_.begin()) - 1;
  while (n > 0) {
    const int64_t local = start - begin_[s];
    const int64_t take = std::min(n, shards_[s]->header().tokens - local);
    copy(s, local, take, out);
    out += take, start += take, n -= take, ++s;
  }
}

void TokenDataset::copy(int64_t start, int64_t n, int32_t* out) const {
  for_each_piece(start, n, out, [&](size_t s, int64_t local, int64_t take, int32_t* to) {
    shards_[s]->copy(local, take, to);
  });
}

void TokenDataset::copy_masks(int64_t start, int64_t n, uint8_t* out) const {
  NDT_CHECK(has_masks(), "TokenDataset {}: its loss masks were not loaded", paths_.front());
  for_each_piece(start, n, out, [&](size_t s, int64_t local, int64_t take, uint8_t* to) {
    masks_[s]->copy(local, take, to);
  });
}

void TokenDataset::scan(const std::function<void(const int32_t*, int64_t, size_t, int64_t)>& f) const {
  constexpr int64_t kChunk = 1 << 20;
  std::vector<int32_t> buffer(kChunk);
  for (size_t s = 0; s < shards_.size(); ++s) {
    const int64_t n = shards_[s]->header().tokens;
    for (int64_t at = 0; at < n; at += kChunk) {
      const int64_t take = std::min(kChunk, n - at);
      shards_[s]->copy(at, take, buffer.data());
      f(buffer.data(), take, s, at);
    }
  }
}

}  // namespace ndt
