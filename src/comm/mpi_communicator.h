// MpiCommunicator: the Communicator over an MPI communicator (Open MPI on CPU).
//
// Blocking forms call MPI's blocking collectives (Open MPI's "tuned" component), not
// the non-blocking call plus a wait, so they match raw MPI (the bar is 95% of its bus
// bandwidth from 1 MiB). Measured with 2 ranks: with Open MPI's defaults, MPI_Iallreduce
// + MPI_Wait (libnbc, binomial tree when in place or under 4 ranks) takes 2.5x the time
// of MPI_Allreduce for 16-64 MiB; with libnbc's ring, which MpiRuntime selects, it is
// within a few percent of it (about 10% slower at 1 MiB). The i* forms use MPI_I* and
// return a Work. Both are covered by the watchdog (comm/watchdog.h).
//
// Element types: f32 -> MPI_FLOAT, i32 -> MPI_INT32_T, u16/bf16/f16 -> MPI_UINT16_T,
// e4m3/e5m2 -> MPI_UINT8_T. Reductions: f32 and i32 with MPI's own ops; bf16 and f16
// with user-defined ops that widen to f32, combine, and round back (MPI has no 16-bit
// float types); avg is sum then division by the group size, for float types only; u16
// and fp8 are for data movement only. MPI 3 counts are int: a call whose buffer holds
// more than INT_MAX elements is refused (Open MPI 4.1 has no MPI_*_c functions).
//
// Errors (bad rank, tag, dtype, size; overlapping buffers; a message of the wrong
// length; an MPI error code) throw ndt::Error naming the operation, the axis and the
// value. The communicator returns MPI errors (MPI_ERRORS_RETURN) rather than aborting.
#pragma once

#include "comm/communicator.h"
#include "comm/mpi_headers.h"
#include "comm/mpi_types.h"  // mpi_datatype


#include <functional>
#include <memory>
#include <string>

namespace ndt {

class MpiCommunicator final : public Communicator {
 public:
  // Wraps `comm`; frees it (MPI_Comm_free) on destruction when `owned`.
  MpiCommunicator(MPI_Comm comm, std::string axis, bool owned);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& axis() const override { return axis_; }
  MPI_Comm native() const { return comm_; }

  WorkHandle iall_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override;
  WorkHandle ireduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                             ReduceOp op) override;
  WorkHandle iall_gather(const void* send, void* recv, size_t send_count, DType dtype) override;
  WorkHandle iall_to_all(const void* send, void* recv, size_t count_per_rank, DType dtype) override;
  WorkHandle iall_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                           const std::vector<size_t>& recv_counts, DType dtype) override;
  WorkHandle isend(const void* buf, size_t count, DType dtype, int dst, int tag) override;
  WorkHandle irecv(void* buf, size_t count, DType dtype, int src, int tag) override;
  WorkHandle ibroadcast(void* buf, size_t count, DType dtype, int root) override;
  WorkHandle ibarrier() override;

  void all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override;
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op) override;
  void all_gather(const void* send, void* recv, size_t send_count, DType dtype) override;
  void all_to_all(const void* send, void* recv, size_t count_per_rank, DType dtype) override;
  void all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                    const std::vector<size_t>& recv_counts, DType dtype) override;
  void send(const void* buf, size_t count, DType dtype, int dst, int tag = 0) override;
  void recv(void* buf, size_t count, DType dtype, int src, int tag = 0) override;
  void broadcast(void* buf, size_t count, DType dtype, int root) override;
  void barrier() override;

  // MPI_Comm_split; color must be >= 0.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) override;
  // MPI_Comm_split_type with MPI_COMM_TYPE_SHARED.
  std::unique_ptr<Communicator> split_by_node(const std::string& axis) override;

 private:
  // One function per operation for both forms; blocking ones return nullptr.
  // Counts a call (payload, wire bytes, those crossing nodes: peer is send's destination).
  void count_op(CommOp op, int64_t payload, int64_t wire, int peer = -1);
  void count_v(CommOp op, int64_t payload, const std::vector<size_t>& send_counts, size_t element);  // all_to_all_v
  WorkHandle start_all_reduce(void* buf, size_t count, DType dtype, ReduceOp op, bool blocking);
  WorkHandle start_reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op,
                                  bool blocking);
  WorkHandle start_all_gather(const void* send, void* recv, size_t send_count, DType dtype, bool blocking);
  WorkHandle start_all_to_all(const void* send, void* recv, size_t count_per_rank, DType dtype, bool blocking);
  WorkHandle start_send(const void* buf, size_t count, DType dtype, int dst, int tag, bool blocking);
  WorkHandle start_recv(void* buf, size_t count, DType dtype, int src, int tag, bool blocking);
  WorkHandle start_broadcast(void* buf, size_t count, DType dtype, int root, bool blocking);
  WorkHandle start_barrier(bool blocking);
  // Issues `call` (given a request: non-blocking; nullptr: blocking, under the
  // watchdog) and runs `after` once the operation is complete.
  WorkHandle run(CommOp op, int64_t bytes, DType dtype, bool blocking, const std::function<int(MPI_Request*)>& call,
                 std::function<void(const MPI_Status&)> after = {});
  // avg's division by the group size, to run after a sum (empty for other ops).
  std::function<void(const MPI_Status&)> averaging(ReduceOp op, void* buf, size_t count, DType dtype) const;

  MPI_Comm comm_;
  std::string axis_;
  bool owned_;
  int rank_ = 0;
  int size_ = 1;
  // Tags of ring reduce-scatters: kRingTagBase + a sequence, reserved (user tags must
  // stay below kRingTagBase).
  static constexpr int kRingTagBase = 30000;
  int ring_sequence_ = 0;
  int next_ring_tag() { return kRingTagBase + (ring_sequence_++ % 2000); }
};

// The world: a duplicate of MPI_COMM_WORLD (so ndtrain's traffic never matches other
// code's messages on MPI_COMM_WORLD), named `axis`. Collective over all ranks; MPI must
// be initialised (MpiRuntime).
std::unique_ptr<MpiCommunicator> mpi_world(const std::string& axis = "world");

}  // namespace ndt
