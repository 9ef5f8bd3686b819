// Hang protection for communication. Every wait on a communication operation (a
// blocking collective, Work::wait, the wait hidden in a Work's destructor) holds a
// CommWaitGuard for its duration. One watchdog thread, started with the first guard,
// wakes every 50 ms and, if a guard has been held longer than the timeout, prints
//   ndtrain: rank 1: all_reduce on mesh axis "dp" (25.0 MiB, f32) did not complete within 5 s at step 12; aborting the job
// to stderr and ends the process with _exit(kCommTimeoutExitCode). mpirun sees a rank
// exit non-zero without MPI_Finalize and ends every other rank of the job.
//
// Why a thread and not a polling loop with a deadline: blocking collectives call MPI's
// blocking functions (the fastest path, see mpi_communicator.h), which cannot be
// polled. The thread never calls MPI (so any MPI thread level works) and never touches
// the guards' callers: the per-wait cost is one uncontended mutex lock to register and
// one to unregister (about 50 ns in all).
#pragma once

#include "comm/communicator.h"
#include "core/dtype.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace ndt {

// Seconds an operation may wait before the job is aborted (default 300). Must be
// positive and finite; applies to waits that start after the call. Process-wide.
void set_comm_timeout_seconds(double seconds);
double comm_timeout_seconds();

// The rank shown in timeout messages (the world rank; MpiRuntime sets it). -1: unknown.
void set_comm_log_rank(int rank);

// A stop signal (SIGTERM, SIGINT) that arrives while this process waits on communication:
// the run cannot reach a step boundary to save, and a launcher that lost a host sends
// SIGTERM to the survivors just before it kills them. The watchdog prints, once, what the
// wait was for (the operation, the axis, the step, the group's ranks on other hosts), so
// the job's output says which peers were lost. Async-signal-safe.
void note_stop_signal(int signal);

// Exit status of a process ended by the watchdog (the CLI uses 1 for errors and 2 for
// internal errors; not 124, which timeout(1) and CI runners report for their own kills).
inline constexpr int kCommTimeoutExitCode = 3;

// "25.0 MiB", "3.9 KiB", "12 B".
std::string format_bytes(int64_t bytes);

// The one-line message printed on timeout (without the newline). step < 0 omits
// "at step N"; a barrier has no size and dtype; peers: the group's ranks on other hosts
// (Communicator::peers_on_other_hosts), named as the ones a lost host or a cut link
// leaves unreachable (omitted when empty).
std::string comm_timeout_message(int rank, CommOp op, std::string_view axis, int64_t bytes, DType dtype,
                                 double timeout_seconds, int64_t step, std::string_view peers = {});
// "; it waits on ranks 2, 3 on host-b, which a lost host or a cut link leaves
// unreachable", or "" for no peers on other hosts.
std::string unreachable_peers_note(std::string_view peers);

// Registers a wait for its lifetime. The axis must outlive the guard. Not copyable.
class CommWaitGuard {
 public:
  CommWaitGuard(CommOp op, std::string_view axis, int64_t bytes, DType dtype, std::string_view peers = {});
  ~CommWaitGuard();
  CommWaitGuard(const CommWaitGuard&) = delete;
  CommWaitGuard& operator=(const CommWaitGuard&) = delete;

 private:
  friend struct WatchdogAccess;
  CommOp op_;
  std::string_view axis_;
  std::string_view peers_;
  int64_t bytes_;
  DType dtype_;
  int64_t step_;
  double timeout_seconds_;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace ndt
