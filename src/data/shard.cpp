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
constexpr size_t kHeaderBytes = kShardHeaderInts * sizeof(int32_t);

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

}  // namespace

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  NDT_CHECK(tokens.size() <= static_cast<size_t>(INT32_MAX),
            "shard {}: {} tokens do not fit the int32 token count of the header (max {})", path,
            tokens.size(), INT32_MAX);
  std::array<int32_t, kShardHeaderInts> header{};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  AtomicFile out(path);
  out.write(header.data(), header.size() * sizeof(int32_t));
  out.write(tokens.data(), tokens.size() * sizeof(uint16_t));
  out.commit();
}

std::vector<uint16_t> read_shard(const std::string& path) {
  const std::string problem = input_file_problem(path);
  NDT_CHECK(problem.empty(), "shard {} {}", path, problem);
  File f(std::fopen(path.c_str(), "rb"));
  NDT_CHECK(f != nullptr, "cannot open shard {}: {}", path, std::strerror(errno));
  NDT_CHECK(std::fseek(f.get(), 0, SEEK_END) == 0, "cannot seek in shard {}", path);
  long end = std::ftell(f.get());
  NDT_CHECK(end >= 0, "cannot get the size of shard {}", path);
  std::rewind(f.get());
  const size_t file_bytes = static_cast<size_t>(end);

  NDT_CHECK(file_bytes >= kHeaderBytes,
            "shard {} is truncated: {} bytes, shorter than the {}-byte header", path, file_bytes,
            kHeaderBytes);
  std::array<int32_t, kShardHeaderInts> header{};
  NDT_CHECK(std::fread(header.data(), sizeof(int32_t), header.size(), f.get()) == header.size(),
            "reading the header of shard {} failed", path);

  if (header[0] != kShardMagic) {
    fail("shard {} has bad magic: expected {}, found {}{}", path, kShardMagic, header[0],
         header[0] == kLlmcCheckpointMagic
             ? " (that is llm.c's model checkpoint magic: this is a checkpoint, not a token shard)"
             : " (not a token shard)");
  }
  NDT_CHECK(header[1] == kShardVersion, "shard {} has unsupported version {} (expected {})", path,
            header[1], kShardVersion);
  const int32_t count = header[2];
  const size_t data_bytes = file_bytes - kHeaderBytes;
  NDT_CHECK(count >= 0, "shard {} has a negative token count {} in its header", path, count);
  const size_t expected_bytes = static_cast<size_t>(count) * sizeof(uint16_t);
  if (expected_bytes != data_bytes) {
    fail("shard {}: header says {} tokens ({} bytes) but the file holds {} bytes of tokens ({}){}",
         path, count, expected_bytes, data_bytes,
         data_bytes < expected_bytes ? "truncated" : "trailing bytes after the tokens",
         data_bytes % 2 ? ", an odd byte count" : "");
  }

  std::vector<uint16_t> tokens(static_cast<size_t>(count));
  if (count > 0) {
    size_t got = std::fread(tokens.data(), sizeof(uint16_t), tokens.size(), f.get());
    NDT_CHECK(got == tokens.size(), "shard {}: read {} of {} tokens (file changed while reading?)",
              path, got, tokens.size());
  }
  return tokens;
}

}  // namespace ndt
