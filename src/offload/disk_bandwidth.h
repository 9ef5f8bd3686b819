// The disk's speed as offload sees it: a swap file written (once to allocate it, as a
// run's first step does, then timed as every later step rewrites it) and read back in
// chunks through the same path training uses (O_DIRECT where allowed, an I/O backend,
// `depth` requests in flight, every read's checksum verified), then removed. The planner's CPU
// profile (plan/device_profile.h) and `ndtrain bench offload` measure with it.
// Writes: 2 x `bytes` into <dir>/bandwidth-probe.swap, removed before it returns. Memory:
// depth x chunk_bytes.
#pragma once

#include "offload/async_io.h"

#include <cstdint>
#include <filesystem>

namespace ndt::offload {

struct DiskBandwidth {
  double write_bytes_per_s = 0;
  double read_bytes_per_s = 0;
  bool direct = false;  // O_DIRECT was in use (else the page cache stood between)
  // Mixed traffic (offload reads and writes about as much): bytes over the time to write
  // and read them, counted once each.
  double mixed_bytes_per_s() const;
};

DiskBandwidth measure_disk_bandwidth(const std::filesystem::path& dir, int64_t bytes, int64_t chunk_bytes,
                                     IoBackend backend, int depth);

}  // namespace ndt::offload
