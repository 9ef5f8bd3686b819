#include "data/shard.h"

#include "core/error.h"
#include "core/input_file.h"
#include "core/output_file.h"

#include <array>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>

namespace ndt {

static_assert(std::endian::native == std::endian::little,
              "shards are little-endian and read/written in host byte order");

namespace {

// llm.c writes its model checkpoints with this magic; a common mix-up with token shards.
constexpr int32_t kLlmcCheckpointMagic = 20240326;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

template <typename T>
void write_tokens(const std::string& path, const std::vector<T>& tokens, int32_t version, int32_t vocab_size) {
  NDT_CHECK(tokens.size() <= static_cast<size_t>(INT32_MAX),
            "shard {}: {} tokens do not fit the int32 token count of the header (max {})", path,
            tokens.size(), INT32_MAX);
  std::array<int32_t, kShardHeaderInts> header{};
  header[0] = kShardMagic;
  header[1] = version;
  header[2] = static_cast<int32_t>(tokens.size());
  header[3] = vocab_size;
  AtomicFile out(path);
  out.write(header.data(), header.size() * sizeof(int32_t));
  out.write(tokens.data(), tokens.size() * sizeof(T));
  out.commit();
}

void check_size(const std::string& path, const ShardHeader& h, size_t data_bytes) {
  const size_t expected = static_cast<size_t>(h.tokens) * h.token_bytes();
  if (expected == data_bytes) return;
  const size_t other = h.token_bytes() == 2 ? 4 : 2;
  const bool other_fits = static_cast<size_t>(h.tokens) * other == data_bytes;
  fail("shard {}: header says version {} ({} tokens) and {} tokens ({} bytes), but the file holds {} bytes of "
       "tokens ({}){}{}",
       path, h.version, h.token_bytes() == 2 ? "uint16" : "uint32", h.tokens, expected, data_bytes,
       data_bytes < expected ? "truncated" : "trailing bytes after the tokens",
       data_bytes % h.token_bytes() ? fmt::format(", a byte count not a multiple of {}", h.token_bytes()) : "",
       other_fits ? fmt::format("; that is the size of {} {} tokens: the tokens' dtype does not match the header's "
                                "version", h.tokens, other == 2 ? "uint16" : "uint32")
                  : "");
}

}  // namespace

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens, int32_t vocab_size) {
  write_tokens(path, tokens, kShardVersion, vocab_size);
}

void write_shard_u32(const std::string& path, const std::vector<uint32_t>& tokens, int32_t vocab_size) {
  write_tokens(path, tokens, kShardVersionU32, vocab_size);
}

ShardHeader read_shard_header(const std::string& path) {
  const std::string problem = input_file_problem(path);
  NDT_CHECK(problem.empty(), "shard {} {}", path, problem);
  File f(std::fopen(path.c_str(), "rb"));
  NDT_CHECK(f != nullptr, "cannot open shard {}: {}", path, std::strerror(errno));
  NDT_CHECK(std::fseek(f.get(), 0, SEEK_END) == 0, "cannot seek in shard {}", path);
  const long end = std::ftell(f.get());
  NDT_CHECK(end >= 0, "cannot get the size of shard {}", path);
  std::rewind(f.get());
  const size_t file_bytes = static_cast<size_t>(end);
  NDT_CHECK(file_bytes >= kShardHeaderBytes, "shard {} is truncated: {} bytes, shorter than the {}-byte header", path,
            file_bytes, kShardHeaderBytes);
  std::array<int32_t, kShardHeaderInts> header{};
  NDT_CHECK(std::fread(header.data(), sizeof(int32_t), header.size(), f.get()) == header.size(),
            "reading the header of shard {} failed", path);
  if (header[0] != kShardMagic) {
    fail("shard {} has bad magic: expected {}, found {}{}", path, kShardMagic, header[0],
         header[0] == kLlmcCheckpointMagic
             ? " (that is llm.c's model checkpoint magic: this is a checkpoint, not a token shard)"
             : " (not a token shard)");
  }
  NDT_CHECK(header[1] == kShardVersion || header[1] == kShardVersionU32,
            "shard {} has unsupported version {} (expected {}: uint16 tokens, or {}: uint32 tokens)", path, header[1],
            kShardVersion, kShardVersionU32);
  NDT_CHECK(header[2] >= 0, "shard {} has a negative token count {} in its header", path, header[2]);
  NDT_CHECK(header[3] >= 0, "shard {} has a negative vocabulary size {} in its header", path, header[3]);
  const ShardHeader h{header[1], header[2], header[3]};
  check_size(path, h, file_bytes - kShardHeaderBytes);
  return h;
}

std::vector<uint16_t> read_shard(const std::string& path) {
  const ShardHeader h = read_shard_header(path);
  NDT_CHECK(h.version == kShardVersion, "shard {} holds uint32 tokens (version {}); read_shard reads uint16 shards",
            path, h.version);
  File f(std::fopen(path.c_str(), "rb"));
  NDT_CHECK(f != nullptr && std::fseek(f.get(), static_cast<long>(kShardHeaderBytes), SEEK_SET) == 0,
            "cannot read shard {}: {}", path, std::strerror(errno));
  std::vector<uint16_t> tokens(static_cast<size_t>(h.tokens));
  if (!tokens.empty()) {
    const size_t got = std::fread(tokens.data(), sizeof(uint16_t), tokens.size(), f.get());
    NDT_CHECK(got == tokens.size(), "shard {}: read {} of {} tokens (file changed while reading?)", path, got,
              tokens.size());
  }
  return tokens;
}

}  // namespace ndt
