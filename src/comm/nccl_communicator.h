// NcclCommunicator: the Communicator over NCCL for one mesh axis, on CUDA device buffers
// (built only with the CUDA backend, NDT_CUDA; docs/gpu.md). It owns a bootstrap
// communicator over the same ranks (MPI, or the group of one): rank 0 creates the NCCL
// id and broadcasts it there, and split()/split_by_node() split the bootstrap and start
// a new NCCL communicator on each part.
//
// Streams: every operation runs on the communicator's own stream, after an event that
// marks what the compute stream (the legacy default stream, kernels/cuda/device.h) had
// launched when it was issued, so the i* forms overlap the kernels launched after them
// (DDP buckets, FSDP prefetch, the ring's K/V exchange, pipeline sends). A Work completes
// when the operation's end event has fired; test() queries it, wait() polls it.
//
// Counters: as MpiCommunicator's (communicator.h's formulas; all_to_all runs as grouped
// sends and receives but is counted as the all_to_all it is). Tags: NCCL has none, so a
// send and its receive pair by order, as NCCL requires. Watchdog: wait() polls against
// comm_timeout_seconds() and, when an operation has not completed, aborts the NCCL
// communicator (ncclCommAbort) and throws ndt::Error with comm/watchdog.h's message
// naming the operation, the axis, the size and the step.
// Element types: f32, bf16, f16, i32 with reductions; u16 and fp8 for data movement.
#pragma once

#include "comm/communicator.h"

#include <functional>
#include <memory>
#include <string>

namespace ndt {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over bootstrap's ranks; the CUDA device must be started (each rank its own
  // GPU: NCCL refuses two ranks on one device, see HostStagedCommunicator).
  explicit NcclCommunicator(std::unique_ptr<Communicator> bootstrap);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return bootstrap_->rank(); }
  int size() const override { return bootstrap_->size(); }
  const std::string& axis() const override { return bootstrap_->axis(); }

  WorkHandle iall_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override;
  WorkHandle ireduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op) override;
  WorkHandle iall_gather(const void* send, void* recv, size_t send_count, DType dtype) override;
  WorkHandle iall_to_all(const void* send, void* recv, size_t count_per_rank, DType dtype) override;
  WorkHandle iall_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                           const std::vector<size_t>& recv_counts, DType dtype) override;
  WorkHandle isend(const void* buf, size_t count, DType dtype, int dst, int tag) override;
  WorkHandle irecv(void* buf, size_t count, DType dtype, int src, int tag) override;
  WorkHandle ibroadcast(void* buf, size_t count, DType dtype, int root) override;
  WorkHandle ibarrier() override;

  std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) override;
  std::unique_ptr<Communicator> split_by_node(const std::string& axis) override;

  struct State;  // the NCCL communicator, stream and barrier scratch (nccl_communicator.cpp)

 private:
  // Counts the call (payload, wire bytes, those crossing nodes; peer: a send's
  // destination), orders the communicator's stream after the compute stream, issues
  // `issue` (NCCL calls on the stream) and returns the Work that completes with it.
  WorkHandle launch(CommOp op, int64_t payload, int64_t wire, int peer, DType dtype,
                    const std::function<void()>& issue);
  // One grouped round of sends and receives (all_to_all and all_to_all_v), blocks packed in rank order.
  void grouped_exchange(const void* send, const std::vector<size_t>& send_counts, void* recv,
                        const std::vector<size_t>& recv_counts, DType dtype);

  std::unique_ptr<Communicator> bootstrap_;
  std::unique_ptr<State> state_;
};

}  // namespace ndt
