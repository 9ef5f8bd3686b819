// Asynchronous file I/O for swap files: a request (read or write of a byte range of a
// file descriptor into or from a buffer) is submitted and returns a ticket at once; the
// caller computes meanwhile and waits for the ticket when it needs the bytes. Two
// backends (docs/offload.md has the measurements that chose the default):
//   io_uring  Linux's submission/completion rings through liburing: one system call
//             submits a batch, the kernel completes the requests itself.
//   threads   a pool of threads each running blocking pread/pwrite.
// Both move whole requests (a short transfer is continued until done or failed) and
// report a failure as -errno. One thread uses an AsyncIo at a time (the compute thread,
// or a checkpoint writer while the compute thread waits for it). Every wait that finds
// its request unfinished is counted as I/O wait (offload/io_stats.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace ndt::offload {

enum class IoBackend { io_uring, threads };
std::string_view io_backend_name(IoBackend backend);  // "io_uring", "threads"
IoBackend io_backend_from_name(std::string_view name);  // throws naming offload.io and the choices

struct IoRequest {
  bool write = false;
  int fd = -1;
  void* buffer = nullptr;  // stays valid (and unread / unwritten by the caller) until wait()
  size_t bytes = 0;
  int64_t offset = 0;
};

class AsyncIo {
 public:
  virtual ~AsyncIo() = default;
  virtual IoBackend backend() const = 0;
  // Queues the request and starts it; returns its ticket (never 0).
  virtual uint64_t submit(const IoRequest& request) = 0;
  // Blocks until the ticket's request is done: the bytes moved (its size), or -errno.
  // Each ticket is waited for exactly once.
  virtual int64_t wait(uint64_t ticket) = 0;
};

// queue_depth: requests in flight at once (io_uring's ring size; the pool's threads are
// min(queue_depth, 4)). Throws naming the backend when it cannot start (io_uring
// disabled by the kernel or a container's seccomp profile).
std::unique_ptr<AsyncIo> make_async_io(IoBackend backend, int queue_depth);

}  // namespace ndt::offload
