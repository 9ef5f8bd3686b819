// Token shards: a header of 256 int32 (magic 20240520, version, token count, vocabulary
// size or 0, rest zero) followed by the tokens, little-endian.
//   version 1: uint16 tokens (llm.c's format; llm.c leaves header[3] zero);
//   version 2: uint32 tokens, for vocabularies past 65,536 (ndtrain's; docs/data.md).
// header[3] holds the vocabulary size of the tokenizer that wrote the shard (0: unknown),
// so mixed vocabularies across the shards of one dataset are caught before training.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ndt {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;        // uint16 tokens
inline constexpr int32_t kShardVersionU32 = 2;     // uint32 tokens
inline constexpr int kShardHeaderInts = 256;
inline constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);

// What a shard's header says, checked against the file's size.
struct ShardHeader {
  int32_t version = kShardVersion;
  int64_t tokens = 0;
  int32_t vocab_size = 0;  // 0: not recorded
  size_t token_bytes() const { return version == kShardVersionU32 ? 4 : 2; }
};

// Written atomically (core/output_file.h): the path holds the whole shard or, after an
// error (which names the file and the reason), nothing; an existing shard is replaced.
// vocab_size goes to header[3] (0: not recorded, as llm.c writes).
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens, int32_t vocab_size = 0);
void write_shard_u32(const std::string& path, const std::vector<uint32_t>& tokens, int32_t vocab_size = 0);

// Reads and checks the header of `path` against its size (the tokens are not read).
// Throws ndt::Error naming the file and what is wrong: missing, unreadable, a folder,
// truncated, bad magic, unknown version, a size that does not match the count for the
// header's dtype (saying when it would match the other dtype).
ShardHeader read_shard_header(const std::string& path);

// Reads a whole version-1 shard (uint16), with read_shard_header's checks.
std::vector<uint16_t> read_shard(const std::string& path);

}  // namespace ndt
