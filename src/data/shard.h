// Token shards in llm.c's format: a header of 256 int32 (magic 20240520, version 1,
// token count, rest zero) followed by the tokens as uint16.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ndt {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr int kShardHeaderInts = 256;

// Written atomically (core/output_file.h): the path holds the whole shard or, after an
// error (which names the file and the reason), nothing; an existing shard is replaced.
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens);

// Reads a whole shard. A missing, unreadable, truncated or foreign file (or a folder)
// throws ndt::Error naming the file and what is wrong (bad magic, bad version, size not
// matching the count).
std::vector<uint16_t> read_shard(const std::string& path);

}  // namespace ndt
