// ndtrain's element types and reductions as MPI sees them: DType -> MPI_Datatype and
// (DType, ReduceOp) -> MPI_Op, including the user-defined ops that reduce bf16 and f16
// through f32 (MPI has no 16-bit float types), and avg's division after a sum. The
// rules are listed in mpi_communicator.h. Kept apart from MpiCommunicator because the
// ring reduce-scatter (comm/ring_reduce_scatter.h) needs them too, with the few other
// helpers both share (error text, MPI error codes, the watched wait), which live in
// ndt::mpi_detail: internal to comm/, not for callers of the Communicator interface.
#pragma once

#include "comm/communicator.h"
#include "comm/mpi_headers.h"
#include "comm/watchdog.h"
#include "core/dtype.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ndt {

MPI_Datatype mpi_datatype(DType dtype);

namespace mpi_detail {

// "all_reduce on mesh axis \"dp\"", prefixed to every error message.
std::string where(CommOp op, const std::string& axis);

// The MPI op for a reduction, or an error for a dtype/op pair we do not reduce.
MPI_Op reduction(CommOp what, const std::string& axis, DType dtype, ReduceOp op);

// Throws ndt::Error with MPI's text for `rc` unless it is MPI_SUCCESS.
// peers: the group's ranks on other hosts (named as possibly unreachable).
void check_mpi(int rc, CommOp what, const std::string& axis, std::string_view peers = {});

// ReduceOp::avg: the sum divided by the group size, in f32 for the 16-bit types.
void divide(void* buf, size_t count, DType dtype, int n);

// A blocking call's wait: watched by the watchdog and added to the counter's wait time.
class TimedWait {
 public:
  TimedWait(CommCounter& counter, CommOp op, std::string_view axis, int64_t bytes, DType dtype,
            std::string_view peers = {})
      : counter_(counter), guard_(op, axis, bytes, dtype, peers), start_(std::chrono::steady_clock::now()) {}
  ~TimedWait() {
    counter_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  CommCounter& counter_;
  CommWaitGuard guard_;
  std::chrono::steady_clock::time_point start_;
};

// Driving a non-blocking operation (its start, its test() polls): added to the counter's
// progress time.
class TimedProgress {
 public:
  explicit TimedProgress(CommCounter& counter) : counter_(counter), start_(std::chrono::steady_clock::now()) {}
  ~TimedProgress() {
    counter_.progress_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  CommCounter& counter_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace mpi_detail
}  // namespace ndt
