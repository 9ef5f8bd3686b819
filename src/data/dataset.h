// A token dataset: one or more shards (shard.h), memory-mapped, never read whole, and
// seen as the concatenation of their tokens in the order given. Reading a window copies
// it out of the mapping and then drops those pages from this process (madvise
// MADV_DONTNEED: the page cache keeps them), so a dataset larger than memory trains with
// a flat resident set. uint16 and uint32 shards may be mixed; vocabulary sizes recorded
// in the headers must agree.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ndt {

class MappedShard;
class MaskFile;

class TokenDataset {
 public:
  // Maps every shard (checking its header against its size) and, with_masks, its loss mask
  // (data/loss_mask.h). Throws ndt::Error naming the file for a missing or malformed shard
  // or mask, naming both files for vocabulary sizes that differ or a mask whose length is
  // not its shard's, and for an empty list.
  explicit TokenDataset(const std::vector<std::string>& shard_paths, bool with_masks = false);
  ~TokenDataset();
  TokenDataset(TokenDataset&&) noexcept;

  int64_t size() const { return size_; }
  const std::vector<std::string>& paths() const { return paths_; }
  int32_t vocab_size() const { return vocab_size_; }  // recorded in the headers; 0: none recorded
  bool wide() const;  // some shard holds uint32 tokens

  // Tokens [start, start + n) of the concatenation as int32. Requires 0 <= start and
  // start + n <= size().
  void copy(int64_t start, int64_t n, int32_t* out) const;
  bool has_masks() const { return !masks_.empty(); }
  // The loss-mask bytes of tokens [start, start + n) (has_masks() only).
  void copy_masks(int64_t start, int64_t n, uint8_t* out) const;
  // Calls f(tokens, n, shard index, offset within the shard) over every token in order,
  // in chunks, dropping each chunk's pages after it.
  void scan(const std::function<void(const int32_t*, int64_t, size_t, int64_t)>& f) const;

 private:
  std::vector<std::string> paths_;
  // Calls copy(shard, offset in it, count, out) for each shard's piece of [start, start + n).
  template <typename T, typename Copy>
  void for_each_piece(int64_t start, int64_t n, T* out, const Copy& copy) const;

  std::vector<std::unique_ptr<MappedShard>> shards_;
  std::vector<std::unique_ptr<MaskFile>> masks_;  // one per shard, or none
  std::vector<int64_t> begin_;  // first token of each shard in the concatenation
  int64_t size_ = 0;
  int32_t vocab_size_ = 0;
};

}  // namespace ndt
