#include "comm/host_staged_communicator.h"

#include "core/error.h"

#include <cuda_runtime.h>

#include <numeric>

namespace ndt {
namespace {

// Complete when created: the staged operation ran to the end inside the call.
class StagedWork final : public Work {
 public:
  bool test() override { return true; }
  void wait() override {}
};

void copy_bytes(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, const std::string& axis) {
  if (bytes == 0) return;
  const cudaError_t status = cudaMemcpy(dst, src, bytes, kind);
  if (status != cudaSuccess) {
    fail("host-staged communicator on mesh axis \"{}\": cudaMemcpy of {} bytes failed: {}", axis, bytes,
         cudaGetErrorString(status));
  }
}

size_t total(const std::vector<size_t>& counts) { return std::accumulate(counts.begin(), counts.end(), size_t{0}); }

}  // namespace

HostStagedCommunicator::HostStagedCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

char* HostStagedCommunicator::staging(int which, size_t bytes) {
  std::vector<char>& buffer = staging_[which];
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

char* HostStagedCommunicator::stage_in(int which, const void* device, size_t bytes) {
  char* host = staging(which, bytes);
  copy_bytes(host, device, bytes, cudaMemcpyDeviceToHost, axis());
  return host;
}

WorkHandle HostStagedCommunicator::finish(void* device, const char* host, size_t bytes) {
  if (device) copy_bytes(device, host, bytes, cudaMemcpyHostToDevice, axis());
  stats_ = inner_->stats();
  return std::make_unique<StagedWork>();
}

WorkHandle HostStagedCommunicator::iall_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  const size_t bytes = count * dtype_size(dtype);
  char* host = stage_in(0, buf, bytes);
  inner_->all_reduce(host, count, dtype, op);
  return finish(buf, host, bytes);
}

WorkHandle HostStagedCommunicator::ireduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                                   ReduceOp op) {
  const size_t element = dtype_size(dtype);
  char* host_send = stage_in(0, send, recv_count * size() * element);
  char* host_recv = staging(1, recv_count * element);
  inner_->reduce_scatter(host_send, host_recv, recv_count, dtype, op);
  return finish(recv, host_recv, recv_count * element);
}

WorkHandle HostStagedCommunicator::iall_gather(const void* send, void* recv, size_t send_count, DType dtype) {
  const size_t element = dtype_size(dtype);
  char* host_send = stage_in(0, send, send_count * element);
  char* host_recv = staging(1, send_count * size() * element);
  inner_->all_gather(host_send, host_recv, send_count, dtype);
  return finish(recv, host_recv, send_count * size() * element);
}

WorkHandle HostStagedCommunicator::iall_to_all(const void* send, void* recv, size_t count_per_rank, DType dtype) {
  const size_t bytes = count_per_rank * size() * dtype_size(dtype);
  char* host_send = stage_in(0, send, bytes);
  char* host_recv = staging(1, bytes);
  inner_->all_to_all(host_send, host_recv, count_per_rank, dtype);
  return finish(recv, host_recv, bytes);
}

WorkHandle HostStagedCommunicator::iall_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                                 const std::vector<size_t>& recv_counts, DType dtype) {
  const size_t element = dtype_size(dtype);
  char* host_send = stage_in(0, send, total(send_counts) * element);
  char* host_recv = staging(1, total(recv_counts) * element);
  inner_->all_to_all_v(host_send, send_counts, host_recv, recv_counts, dtype);
  return finish(recv, host_recv, total(recv_counts) * element);
}

WorkHandle HostStagedCommunicator::isend(const void* buf, size_t count, DType dtype, int dst, int tag) {
  char* host = stage_in(0, buf, count * dtype_size(dtype));
  inner_->send(host, count, dtype, dst, tag);
  return finish(nullptr, nullptr, 0);
}

WorkHandle HostStagedCommunicator::irecv(void* buf, size_t count, DType dtype, int src, int tag) {
  const size_t bytes = count * dtype_size(dtype);
  char* host = staging(1, bytes);
  inner_->recv(host, count, dtype, src, tag);
  return finish(buf, host, bytes);
}

WorkHandle HostStagedCommunicator::ibroadcast(void* buf, size_t count, DType dtype, int root) {
  const size_t bytes = count * dtype_size(dtype);
  char* host = stage_in(0, buf, bytes);
  inner_->broadcast(host, count, dtype, root);
  return finish(buf, host, bytes);
}

WorkHandle HostStagedCommunicator::ibarrier() {
  inner_->barrier();
  return finish(nullptr, nullptr, 0);
}

std::unique_ptr<Communicator> HostStagedCommunicator::split(int color, int key, const std::string& axis) {
  return std::make_unique<HostStagedCommunicator>(inner_->split(color, key, axis));
}

std::unique_ptr<Communicator> HostStagedCommunicator::split_by_node(const std::string& axis) {
  return std::make_unique<HostStagedCommunicator>(inner_->split_by_node(axis));
}

}  // namespace ndt
