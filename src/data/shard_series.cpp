#include "data/shard_series.h"

#include "core/error.h"
#include "data/loss_mask.h"
#include "data/shard.h"

#include <fmt/format.h>

#include <filesystem>

namespace ndt {

ShardSeries::ShardSeries(std::string dir, std::string prefix, int64_t shard_tokens, bool wide, int32_t vocab,
                         bool masks)
    : dir_(std::move(dir)), prefix_(std::move(prefix)), shard_tokens_(shard_tokens), wide_(wide), vocab_(vocab),
      masks_(masks) {}

void ShardSeries::add(const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask, int32_t separator) {
  NDT_CHECK(mask.size() == (masks_ ? ids.size() : 0), "ShardSeries {}: {} mask bytes for {} tokens", prefix_,
            mask.size(), ids.size());
  push(separator, 0);
  for (size_t i = 0; i < ids.size(); ++i) push(ids[i], masks_ ? mask[i] : 0);
}

void ShardSeries::finish() {
  if (!buffer_.empty()) flush();
}

void ShardSeries::push(int32_t id, uint8_t mask) {
  buffer_.push_back(static_cast<uint32_t>(id));
  if (masks_) mask_buffer_.push_back(mask);
  ++tokens_;
  counted_ += mask;
  if (static_cast<int64_t>(buffer_.size()) == shard_tokens_) flush();
}

void ShardSeries::flush() {
  const std::string path =
      (std::filesystem::path(dir_) / fmt::format("{}_{:06d}.bin", prefix_, shards_.size())).string();
  if (wide_) {
    write_shard_u32(path, buffer_, vocab_);
  } else {
    write_shard(path, std::vector<uint16_t>(buffer_.begin(), buffer_.end()), vocab_);
  }
  if (masks_) write_mask(mask_path(path), mask_buffer_);
  shards_.push_back(path);
  buffer_.clear();
  mask_buffer_.clear();
}

}  // namespace ndt
