// HostStagedCommunicator: device buffers over a host communicator (MPI, or the group of
// one), device -> host -> the inner communicator -> device. NCCL refuses two ranks on one
// GPU, so this is how several processes sharing one device test the layouts (DDP, FSDP,
// tp, pp, cp) against one rank. Built only with the CUDA backend (NDT_CUDA).
//
// Every operation copies its device send buffer into a host staging buffer, runs the
// inner communicator's blocking operation on it and copies the result back to the
// device; the non-blocking forms therefore complete before they return (nothing
// overlaps: this path is for correctness, not speed). Counters are the inner
// communicator's (the bytes between ranks; the host copies are not communication), and
// so are the watchdog and the error messages.
#pragma once

#include "comm/communicator.h"

#include <memory>
#include <string>
#include <vector>

namespace ndt {

class HostStagedCommunicator final : public Communicator {
 public:
  explicit HostStagedCommunicator(std::unique_ptr<Communicator> inner);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& axis() const override { return inner_->axis(); }

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

 private:
  // Copies `bytes` of device memory into staging buffer `which` (0: send, 1: receive) and returns it.
  char* stage_in(int which, const void* device, size_t bytes);
  char* staging(int which, size_t bytes);
  // Copies host bytes back to the device, then mirrors the inner counters into stats().
  WorkHandle finish(void* device, const char* host, size_t bytes);

  std::unique_ptr<Communicator> inner_;
  std::vector<char> staging_[2];
};

}  // namespace ndt
