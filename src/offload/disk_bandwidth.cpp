#include "offload/disk_bandwidth.h"

#include "core/error.h"
#include "core/timing.h"
#include "offload/io_buffer.h"
#include "offload/swap_file.h"

#include <chrono>
#include <deque>
#include <vector>

namespace ndt::offload {

double DiskBandwidth::mixed_bytes_per_s() const {
  if (write_bytes_per_s <= 0 || read_bytes_per_s <= 0) return 0;
  return 2.0 / (1.0 / write_bytes_per_s + 1.0 / read_bytes_per_s);
}

namespace {

// Seconds to move every chunk of `file` one way with `depth` transfers in flight.
double one_pass(SwapFile& file, std::vector<IoBuffer>& buffers, bool write) {
  const auto t0 = std::chrono::steady_clock::now();
  std::deque<SwapFile::Pending> in_flight;
  try {
    for (int64_t c = 0; c < file.chunks(); ++c) {
      if (in_flight.size() == buffers.size()) file.finish(in_flight.front()), in_flight.pop_front();
      void* buffer = buffers[static_cast<size_t>(c) % buffers.size()].data();
      in_flight.push_back(write ? file.start_write(c, buffer) : file.start_read(c, buffer));
    }
    for (SwapFile::Pending& p : in_flight) file.finish(p);
  } catch (...) {
    for (SwapFile::Pending& p : in_flight) file.abandon(p);
    throw;
  }
  return seconds_since(t0);
}

}  // namespace

DiskBandwidth measure_disk_bandwidth(const std::filesystem::path& dir, int64_t bytes, int64_t chunk_bytes,
                                     IoBackend backend, int depth) {
  NDT_CHECK(bytes >= chunk_bytes && chunk_bytes > 0 && depth >= 1, "offload: a disk probe of {} bytes in chunks of {}",
            bytes, chunk_bytes);
  std::unique_ptr<AsyncIo> io = make_async_io(backend, depth);
  std::vector<IoBuffer> buffers;
  for (int i = 0; i < depth; ++i) {
    buffers.emplace_back(static_cast<size_t>(chunk_bytes), MemTag::other);
    uint32_t x = 0x9e3779b9u * static_cast<uint32_t>(i + 1);
    auto* words = static_cast<uint32_t*>(buffers.back().data());
    for (size_t w = 0; w < buffers.back().bytes() / 4; ++w) x = x * 1664525u + 1013904223u, words[w] = x;
  }
  SwapFile file(dir / "bandwidth-probe.swap", bytes / chunk_bytes, chunk_bytes, MemTag::other, *io);
  DiskBandwidth d;
  d.direct = file.direct();
  const double moved = static_cast<double>(file.bytes());
  one_pass(file, buffers, true);  // allocates the file's blocks, as a run's first step does
  d.write_bytes_per_s = moved / one_pass(file, buffers, true);  // rewrites them, as every later step
  d.read_bytes_per_s = moved / one_pass(file, buffers, false);
  return d;
}

}  // namespace ndt::offload
