#include "data/loss_mask.h"

#include "checkpoint/checksum.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/output_file.h"
#include "data/shard.h"

#include <array>
#include <bit>
#include <climits>
#include <cstring>
#include <filesystem>

namespace ndt {

std::string mask_path(const std::string& shard) {
  const std::string bin = ".bin";
  const bool has_bin = shard.size() > bin.size() && shard.compare(shard.size() - bin.size(), bin.size(), bin) == 0;
  return (has_bin ? shard.substr(0, shard.size() - bin.size()) : shard) + ".mask";
}

void write_mask(const std::string& path, const std::vector<uint8_t>& mask) {
  NDT_CHECK(mask.size() <= static_cast<size_t>(INT32_MAX), "mask {}: {} bytes do not fit the int32 count (max {})",
            path, mask.size(), INT32_MAX);
  for (size_t i = 0; i < mask.size(); ++i) {
    NDT_CHECK(mask[i] <= 1, "mask {}: byte {} is {}, not 0 or 1", path, i, mask[i]);
  }
  std::array<int32_t, kShardHeaderInts> header{};
  header[0] = kMaskMagic;
  header[1] = kMaskVersion;
  header[2] = static_cast<int32_t>(mask.size());
  header[3] = std::bit_cast<int32_t>(ckpt::crc32c(mask.data(), mask.size()));
  AtomicFile out(path);
  out.write(header.data(), sizeof(header));
  out.write(mask.data(), mask.size());
  out.commit();
}

MaskFile::MaskFile(const std::string& path, const std::string& shard, int64_t shard_tokens) {
  const std::string problem = input_file_problem(path);
  NDT_CHECK(problem.empty(), "loss mask {} of shard {} {} (data.loss_mask = true needs a mask beside every shard: "
            "`ndtrain prepare --format chat` or `--format prompt-response` writes them)", path, shard, problem);
  const auto bytes = std::filesystem::file_size(path);
  NDT_CHECK(bytes >= kShardHeaderBytes, "loss mask {} is truncated: {} bytes, shorter than the {}-byte header", path,
            bytes, kShardHeaderBytes);
  file_ = std::make_unique<MappedFile>(path, static_cast<size_t>(bytes));
  std::array<int32_t, kShardHeaderInts> header{};
  std::memcpy(header.data(), file_->data(), sizeof(header));
  NDT_CHECK(header[0] == kMaskMagic, "loss mask {} has bad magic: expected {}, found {} (not a mask file)", path,
            kMaskMagic, header[0]);
  NDT_CHECK(header[1] == kMaskVersion, "loss mask {} has unsupported version {} (expected {})", path, header[1],
            kMaskVersion);
  NDT_CHECK(static_cast<uint64_t>(header[2]) + kShardHeaderBytes == bytes && header[2] >= 0,
            "loss mask {}: its header says {} bytes of mask, but the file holds {} after the header ({})", path,
            header[2], bytes - kShardHeaderBytes, bytes - kShardHeaderBytes < static_cast<uint64_t>(header[2])
                                                       ? "truncated" : "trailing bytes");
  NDT_CHECK(header[2] == shard_tokens,
            "loss mask {} holds {} bytes, but its shard {} holds {} tokens: the mask must have one byte per token "
            "(was the shard or the mask replaced alone?)", path, header[2], shard, shard_tokens);
  check_bytes(path, std::bit_cast<uint32_t>(header[3]));
}

void MaskFile::check_bytes(const std::string& path, uint32_t expected_crc) const {
  const uint8_t* bytes = file_->data() + kShardHeaderBytes;
  const size_t n = file_->size() - kShardHeaderBytes;
  constexpr size_t kChunk = size_t{1} << 24;
  uint32_t crc = 0;
  for (size_t at = 0; at < n; at += kChunk) {
    const size_t take = std::min(kChunk, n - at);
    crc = ckpt::crc32c(bytes + at, take, crc);
    for (size_t i = 0; i < take; ++i) {
      NDT_CHECK(bytes[at + i] <= 1, "loss mask {}: byte {} is {}, not 0 or 1", path, at + i, bytes[at + i]);
    }
    file_->release(kShardHeaderBytes + at, take);
  }
  NDT_CHECK(crc == expected_crc, "loss mask {} fails its checksum: CRC32C {:08x}, its header records {:08x} "
            "(the file is corrupt)", path, crc, expected_crc);
}

void MaskFile::copy(int64_t begin, int64_t n, uint8_t* out) const {
  const size_t offset = kShardHeaderBytes + static_cast<size_t>(begin);
  std::memcpy(out, file_->data() + offset, static_cast<size_t>(n));
  file_->release(offset, static_cast<size_t>(n));
}

}  // namespace ndt
