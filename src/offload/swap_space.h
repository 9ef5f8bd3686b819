// One rank's swap folder (offload.dir/rank-NNNNN, created and locked by the run: the
// files in it are the run's own) and the asynchronous I/O its swap files share. Creating
// a swap file first checks that the filesystem has room for every swap file of the run
// at its full size, so a disk too small is named before step 1 rather than found in
// the middle of one. Writes: the swap files (offload/swap_file.h); leftovers of a run
// that died (*.swap, *.swap.restore) are removed when the space opens.
#pragma once

#include "offload/async_io.h"
#include "offload/swap_file.h"
#include "offload/swap_layout.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace ndt::offload {

// The [offload] settings as the data-parallel layouts take them (docs/offload.md).
struct OffloadOptions {
  bool optimizer = false;       // AdamW moments on disk (offload.optimizer = "disk")
  bool params = false;          // parameter and gradient shards on disk too (offload.params = "disk")
  std::filesystem::path dir;    // this rank's swap folder
  int64_t chunk_bytes = 4 << 20;
  int prefetch = 2;             // chunks (optimizer) or units (parameters) read ahead
  IoBackend backend = IoBackend::io_uring;
  bool active() const { return optimizer || params; }
  int64_t chunk_elements() const { return chunk_bytes / static_cast<int64_t>(sizeof(float)); }
};

class SwapSpace {
 public:
  explicit SwapSpace(const OffloadOptions& options);
  SwapSpace(const SwapSpace&) = delete;
  SwapSpace& operator=(const SwapSpace&) = delete;

  // <dir>/<name>.swap with `chunks` chunks; throws SwapError naming offload.dir when the
  // filesystem lacks the room (the bytes needed and free).
  std::unique_ptr<SwapFile> create(const std::string& name, int64_t chunks, MemTag tag);
  const OffloadOptions& options() const { return options_; }
  AsyncIo& io() { return *io_; }

 private:
  OffloadOptions options_;
  std::unique_ptr<AsyncIo> io_;
  int64_t created_bytes_ = 0;  // full size of every swap file created so far
};

}  // namespace ndt::offload
