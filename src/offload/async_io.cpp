#include "offload/async_io.h"

#include "core/error.h"
#include "offload/thread_pool_io.h"
#include "offload/uring_io.h"

#include <algorithm>

namespace ndt::offload {

std::string_view io_backend_name(IoBackend backend) {
  return backend == IoBackend::io_uring ? "io_uring" : "threads";
}

IoBackend io_backend_from_name(std::string_view name) {
  if (name == "io_uring") return IoBackend::io_uring;
  if (name == "threads") return IoBackend::threads;
  fail("offload.io = \"{}\" is not an I/O backend: io_uring or threads", name);
}

std::unique_ptr<AsyncIo> make_async_io(IoBackend backend, int queue_depth) {
  NDT_CHECK(queue_depth >= 1, "offload: an I/O queue depth of {} (at least 1)", queue_depth);
  if (backend == IoBackend::io_uring) return std::make_unique<UringIo>(queue_depth);
  return std::make_unique<ThreadPoolIo>(std::min(queue_depth, 4));
}

}  // namespace ndt::offload
