// Loss masks (data.loss_mask, docs/data.md): one byte per token of a shard, 1 where the
// token counts as a target (a response token), 0 where it does not (prompts, system and
// user turns, a chat template's headers). The byte of token i masks the target that is
// token i: position t of a row predicts token t + 1, so the loader masks that target with
// the byte of token t + 1. A shard's mask is the file beside it named by mask_path():
//   header of 256 int32: magic 20261205, version 1, token count, CRC32C of the mask bytes
//   (as in checkpoints), rest zero; then the bytes, each 0 or 1.
#pragma once

#include "core/mapped_file.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ndt {

inline constexpr int32_t kMaskMagic = 20261205;
inline constexpr int32_t kMaskVersion = 1;

// "<shard without .bin>.mask" (".mask" appended when the shard's name has no .bin), so a
// shard glob such as train_*.bin never matches a mask.
std::string mask_path(const std::string& shard);

// Written atomically (core/output_file.h). Throws naming the file for a byte other than 0
// or 1, or a count past the header's int32.
void write_mask(const std::string& path, const std::vector<uint8_t>& mask);

// A shard's mask, mapped read-only. The constructor checks, naming the mask file: it
// exists, its magic and version, its size against its count, its count against the
// shard's token count (naming the shard too), its checksum (one pass over the bytes) and
// that every byte is 0 or 1.
class MaskFile {
 public:
  MaskFile(const std::string& path, const std::string& shard, int64_t shard_tokens);
  // Bytes [begin, begin + n) of the mask, then drops their pages from this process.
  void copy(int64_t begin, int64_t n, uint8_t* out) const;

 private:
  void check_bytes(const std::string& path, uint32_t expected_crc) const;
  std::unique_ptr<MappedFile> file_;
};

}  // namespace ndt
