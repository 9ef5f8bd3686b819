#include "checkpoint/writer.h"

#include "checkpoint/box.h"
#include "checkpoint/checksum.h"
#include "checkpoint/file_io.h"
#include "core/error.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

namespace ndt::ckpt {

static_assert(std::endian::native == std::endian::little,
              "data files hold little-endian f32, written in host byte order");

namespace {

std::optional<int64_t> abort_after_bytes() {
  const char* value = std::getenv("NDT_CHECKPOINT_ABORT_AFTER_BYTES");
  if (value == nullptr || *value == '\0') return std::nullopt;
  char* end = nullptr;
  const long long n = std::strtoll(value, &end, 10);
  NDT_CHECK(*end == '\0' && n >= 0, "NDT_CHECKPOINT_ABORT_AFTER_BYTES={} is not a byte count",
            value);
  return n;
}

// NDT_CHECKPOINT_SLOW_RANK=R:MS: how long `rank` sleeps before writing its index.
std::chrono::milliseconds slow_rank_delay(int rank) {
  const char* value = std::getenv("NDT_CHECKPOINT_SLOW_RANK");
  if (value == nullptr || *value == '\0') return std::chrono::milliseconds(0);
  auto number = [](const char* begin, const char* end) -> long long {
    if (begin == end || end - begin > 9) return -1;
    long long n = 0;
    for (const char* c = begin; c != end; ++c) {
      if (*c < '0' || *c > '9') return -1;
      n = 10 * n + (*c - '0');
    }
    return n;
  };
  const char* colon = std::strchr(value, ':');
  const long long slow = colon ? number(value, colon) : -1;
  const long long ms = colon ? number(colon + 1, value + std::strlen(value)) : -1;
  NDT_CHECK(slow >= 0 && ms >= 0, "NDT_CHECKPOINT_SLOW_RANK={} is not RANK:MILLISECONDS (e.g. 1:500)", value);
  return slow == rank ? std::chrono::milliseconds(ms) : std::chrono::milliseconds(0);
}

void check_block(const TensorBlock& b) {
  const Box whole{Shape(b.logical_shape.size(), 0), b.logical_shape};
  NDT_CHECK(contains(whole, Box{b.offset, b.shape}),
            "tensor {}: block at {} does not fit its logical shape {}", b.name,
            box_str(Box{b.offset, b.shape}), shape_str(b.logical_shape));
  NDT_CHECK(static_cast<int64_t>(b.data.size()) == shape_numel(b.shape) || (b.data.empty() && b.source),
            "tensor {}: block shape {} holds {} floats but its data has {}", b.name,
            shape_str(b.shape), shape_numel(b.shape), b.data.size());
}

// Writes a block's floats from its source through a bounded buffer; their CRC32C.
uint32_t write_from_source(PosixFile& data, const TensorBlock& b, std::optional<int64_t> abort_after, int64_t pos) {
  constexpr int64_t kPiece = int64_t{1} << 20;  // floats
  const int64_t n = shape_numel(b.shape);
  std::vector<float> piece(static_cast<size_t>(std::min(n, kPiece)));
  uint32_t crc = 0;
  for (int64_t first = 0; first < n; first += kPiece) {
    const int64_t count = std::min(kPiece, n - first);
    b.source(first, count, piece.data());
    const auto bytes = static_cast<size_t>(count) * sizeof(float);
    if (abort_after && pos + static_cast<int64_t>(bytes) > *abort_after) {
      data.write_all(piece.data(), static_cast<size_t>(*abort_after - pos));
      std::_Exit(kAbortHookExitCode);
    }
    data.write_all(piece.data(), bytes);
    crc = crc32c(piece.data(), bytes, crc);
    pos += static_cast<int64_t>(bytes);
  }
  return crc;
}

}  // namespace

WriteStats write_rank_file(const std::filesystem::path& dir, int rank,
                           const std::vector<TensorBlock>& blocks) {
  const auto start = std::chrono::steady_clock::now();
  for (const TensorBlock& b : blocks) check_block(b);
  const std::optional<int64_t> abort_after = abort_after_bytes();
  const std::chrono::milliseconds delay = slow_rank_delay(rank);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  NDT_CHECK(!ec, "cannot create checkpoint directory {}: {}", dir.string(), ec.message());

  const std::string file_name = rank_file_name(rank);
  PosixFile data = PosixFile::create(dir / file_name);
  nlohmann::json index = nlohmann::json::array();
  int64_t pos = 0;
  for (const TensorBlock& b : blocks) {
    const auto bytes = static_cast<int64_t>(shape_numel(b.shape) * sizeof(float));
    uint32_t crc = 0;
    if (b.data.empty() && b.source) {
      crc = write_from_source(data, b, abort_after, pos);
    } else {
      if (abort_after && pos + bytes > *abort_after) {
        data.write_all(b.data.data(), static_cast<size_t>(*abort_after - pos));
        std::_Exit(kAbortHookExitCode);
      }
      data.write_all(b.data.data(), static_cast<size_t>(bytes));
      crc = crc32c(b.data.data(), static_cast<size_t>(bytes));
    }
    nlohmann::json entry = Chunk{b.offset, b.shape, file_name, pos, bytes, crc};
    entry["name"] = b.name;
    entry["logical_shape"] = b.logical_shape;
    entry["dtype"] = kDType;
    index.push_back(std::move(entry));
    pos += bytes;
  }
  data.sync();
  data.close();
  if (delay.count() > 0) std::this_thread::sleep_for(delay);  // test hook: this rank finishes last
  write_file_durably(dir / index_file_name(rank), index.dump(1));
  sync_directory(dir);
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return WriteStats{pos, elapsed.count()};
}

}  // namespace ndt::ckpt
