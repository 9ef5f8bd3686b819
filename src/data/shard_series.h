// One split's shards for `ndtrain prepare --tokenizer`: documents' tokens buffered up to
// shard_tokens, then written as one shard (PREFIX_NNNNNN.bin, uint16 or uint32 by `wide`)
// and, with masks, its loss mask beside it (data/loss_mask.h). Each document is preceded
// by the separator token, whose mask byte is 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ndt {

class ShardSeries {
 public:
  ShardSeries(std::string dir, std::string prefix, int64_t shard_tokens, bool wide, int32_t vocab, bool masks);
  // mask: one byte per id (with masks), else empty.
  void add(const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask, int32_t separator);
  void finish();  // writes the last, partial shard
  const std::vector<std::string>& shards() const { return shards_; }
  int64_t tokens() const { return tokens_; }
  int64_t counted() const { return counted_; }  // tokens whose mask byte is 1

 private:
  void push(int32_t id, uint8_t mask);
  void flush();
  std::string dir_, prefix_;
  int64_t shard_tokens_;
  bool wide_;
  int32_t vocab_;
  bool masks_;
  std::vector<uint32_t> buffer_;
  std::vector<uint8_t> mask_buffer_;
  std::vector<std::string> shards_;
  int64_t tokens_ = 0, counted_ = 0;
};

}  // namespace ndt
