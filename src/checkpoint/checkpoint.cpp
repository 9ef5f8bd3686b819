#include "checkpoint/checkpoint.h"

#include "checkpoint/checksum.h"

#include <fmt/format.h>

namespace ndt::ckpt {

void to_json(nlohmann::json& j, const Chunk& chunk) {
  j = {{"offset", chunk.offset},           {"shape", chunk.shape},
       {"file", chunk.file},               {"byte_offset", chunk.byte_offset},
       {"byte_length", chunk.byte_length}, {"crc32c", chunk.crc32c}};
}

void from_json(const nlohmann::json& j, Chunk& chunk) {
  j.at("offset").get_to(chunk.offset);
  j.at("shape").get_to(chunk.shape);
  j.at("file").get_to(chunk.file);
  j.at("byte_offset").get_to(chunk.byte_offset);
  j.at("byte_length").get_to(chunk.byte_length);
  j.at("crc32c").get_to(chunk.crc32c);
}

std::string metadata_checksum(const nlohmann::json& metadata) {
  nlohmann::json rest = metadata;
  rest.erase("metadata_crc32c");
  const std::string text = rest.dump();
  return fmt::format("{:08x}", crc32c(text.data(), text.size()));
}

std::string rank_file_name(int rank) { return fmt::format("rank-{:05d}.bin", rank); }

std::string index_file_name(int rank) { return fmt::format("index-rank-{:05d}.json", rank); }

}  // namespace ndt::ckpt
