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

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens);

// Reads a whole shard. A missing, truncated or foreign file throws ndt::Error naming
// the file and what is wrong (bad magic, bad version, size not matching the count).
std::vector<uint16_t> read_shard(const std::string& path);

}  // namespace ndt
