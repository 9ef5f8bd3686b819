#include "comm/nccl_communicator.h"

#include "comm/watchdog.h"
#include "core/error.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <thread>

namespace ndt {

struct NcclCommunicator::State {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int* barrier_word = nullptr;  // one device int that ibarrier all-reduces
  bool aborted = false;
};

namespace {

void check_cuda(cudaError_t status, const char* call, const std::string& axis) {
  if (status != cudaSuccess) fail("NCCL communicator on mesh axis \"{}\": {} failed: {}", axis, call, cudaGetErrorString(status));
}

void check_nccl(ncclResult_t status, const char* call, const std::string& axis) {
  if (status != ncclSuccess) {
    fail("NCCL communicator on mesh axis \"{}\": {} failed: {}", axis, call, ncclGetErrorString(status));
  }
}

#define NDT_NCCL(call) check_nccl((call), #call, axis())
#define NDT_NCCL_CUDA(call) check_cuda((call), #call, axis())

// NCCL's element type for dtype; data movement (reduce = false) also takes u16 and fp8 as bytes.
ncclDataType_t nccl_type(DType dtype, bool reduce, CommOp op, const std::string& axis) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
    default:
      NDT_CHECK(!reduce, "{} on mesh axis \"{}\": dtype {} cannot be reduced (f32, bf16, f16, i32 can)",
                comm_op_name(op), axis, dtype_name(dtype));
      return ncclUint8;
  }
}

// Elements of NCCL's type for count elements of dtype (bytes for the types moved as bytes).
size_t nccl_count(size_t count, DType dtype, ncclDataType_t type) {
  return type == ncclUint8 ? count * dtype_size(dtype) : count;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

int64_t bytes_of(size_t count, DType dtype) { return static_cast<int64_t>(count * dtype_size(dtype)); }

// An operation on the communicator's stream: done when its end event fired. wait() polls
// under the timeout; past it, the NCCL communicator is aborted and the error names the
// operation, the axis, the size and the step.
class NcclWork final : public Work {
 public:
  NcclWork(NcclCommunicator::State& state, const std::string& axis, int rank, CommOp op, int64_t bytes, DType dtype,
           CommCounter& counter)
      : state_(state), axis_(axis), rank_(rank), op_(op), bytes_(bytes), dtype_(dtype), counter_(counter) {
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreateWithFlags", axis_);
    check_cuda(cudaEventRecord(done_, state_.stream), "cudaEventRecord", axis_);
  }
  ~NcclWork() override {
    if (!finished_ && !state_.aborted) {
      try {
        wait();
      } catch (...) {  // a destructor must not throw; the abort has been reported by wait()
      }
    }
    cudaEventDestroy(done_);
  }
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;

  bool test() override {
    if (finished_) return true;
    const cudaError_t status = cudaEventQuery(done_);
    if (status == cudaErrorNotReady) return false;
    check_cuda(status, "cudaEventQuery", axis_);
    finished_ = true;
    return true;
  }

  void wait() override {
    const auto start = std::chrono::steady_clock::now();
    const double timeout = comm_timeout_seconds();
    while (!test()) {
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout) {
        ncclCommAbort(state_.comm);
        state_.aborted = true;
        counter_.wait_seconds += waited;
        fail("{} (NCCL communicator aborted)",
             comm_timeout_message(rank_, op_, axis_, bytes_, dtype_, timeout, comm_step()));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    counter_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  NcclCommunicator::State& state_;
  const std::string& axis_;
  int rank_;
  CommOp op_;
  int64_t bytes_;
  DType dtype_;
  CommCounter& counter_;
  cudaEvent_t done_ = nullptr;
  bool finished_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(std::unique_ptr<Communicator> bootstrap)
    : bootstrap_(std::move(bootstrap)), state_(std::make_unique<State>()) {
  ncclUniqueId id{};
  if (rank() == 0) NDT_NCCL(ncclGetUniqueId(&id));
  static_assert(sizeof(id) % 4 == 0);
  bootstrap_->broadcast(&id, sizeof(id) / 4, DType::i32, 0);
  NDT_NCCL_CUDA(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking));
  NDT_NCCL_CUDA(cudaMalloc(&state_->barrier_word, sizeof(int)));
  NDT_NCCL_CUDA(cudaMemset(state_->barrier_word, 0, sizeof(int)));
  NDT_NCCL(ncclCommInitRank(&state_->comm, size(), id, rank()));
}

NcclCommunicator::~NcclCommunicator() {
  if (!state_->aborted) ncclCommDestroy(state_->comm);
  cudaFree(state_->barrier_word);
  cudaStreamDestroy(state_->stream);
}

WorkHandle NcclCommunicator::launch(CommOp op, int64_t payload, int64_t wire, int peer, DType dtype,
                                    const std::function<void()>& issue) {
  NDT_CHECK(!state_->aborted, "{} on mesh axis \"{}\": the NCCL communicator was aborted after a timeout",
            comm_op_name(op), axis());
  CommCounter& c = stats_[op];
  c.calls += 1;
  c.payload_bytes += payload;
  c.wire_bytes += wire;
  c.inter_node_wire_bytes += op == CommOp::all_to_all_v ? 0 : inter_node_bytes(op, wire, peer);
  // The communicator's stream waits for what the compute stream (the legacy default
  // stream) has launched so far; kernels launched after this call overlap the operation.
  cudaEvent_t launched = nullptr;
  NDT_NCCL_CUDA(cudaEventCreateWithFlags(&launched, cudaEventDisableTiming));
  NDT_NCCL_CUDA(cudaEventRecord(launched, nullptr));
  NDT_NCCL_CUDA(cudaStreamWaitEvent(state_->stream, launched, 0));
  cudaEventDestroy(launched);
  issue();
  return std::make_unique<NcclWork>(*state_, axis(), rank(), op, payload, dtype, c);
}

WorkHandle NcclCommunicator::iall_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  const ncclDataType_t type = nccl_type(dtype, true, CommOp::all_reduce, axis());
  const int64_t bytes = bytes_of(count, dtype);
  return launch(CommOp::all_reduce, bytes, comm_wire_bytes(CommOp::all_reduce, bytes, size()), -1, dtype, [&] {
    NDT_NCCL(ncclAllReduce(buf, buf, count, type, nccl_op(op), state_->comm, state_->stream));
  });
}

WorkHandle NcclCommunicator::ireduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                             ReduceOp op) {
  const ncclDataType_t type = nccl_type(dtype, true, CommOp::reduce_scatter, axis());
  const int64_t bytes = bytes_of(recv_count * size(), dtype);
  return launch(CommOp::reduce_scatter, bytes, comm_wire_bytes(CommOp::reduce_scatter, bytes, size()), -1, dtype,
                [&] { NDT_NCCL(ncclReduceScatter(send, recv, recv_count, type, nccl_op(op), state_->comm, state_->stream)); });
}

WorkHandle NcclCommunicator::iall_gather(const void* send, void* recv, size_t send_count, DType dtype) {
  const ncclDataType_t type = nccl_type(dtype, false, CommOp::all_gather, axis());
  const int64_t bytes = bytes_of(send_count * size(), dtype);
  return launch(CommOp::all_gather, bytes, comm_wire_bytes(CommOp::all_gather, bytes, size()), -1, dtype, [&] {
    NDT_NCCL(ncclAllGather(send, recv, nccl_count(send_count, dtype, type), type, state_->comm, state_->stream));
  });
}

WorkHandle NcclCommunicator::iall_to_all(const void* send, void* recv, size_t count_per_rank, DType dtype) {
  const std::vector<size_t> counts(static_cast<size_t>(size()), count_per_rank);
  const int64_t bytes = bytes_of(count_per_rank * size(), dtype);
  return launch(CommOp::all_to_all, bytes, comm_wire_bytes(CommOp::all_to_all, bytes, size()), -1, dtype,
                [&] { grouped_exchange(send, counts, recv, counts, dtype); });
}

WorkHandle NcclCommunicator::iall_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                           const std::vector<size_t>& recv_counts, DType dtype) {
  NDT_CHECK(send_counts.size() == static_cast<size_t>(size()) && recv_counts.size() == static_cast<size_t>(size()),
            "all_to_all_v on mesh axis \"{}\": {} send and {} receive counts for a group of {} ranks", axis(),
            send_counts.size(), recv_counts.size(), size());
  int64_t payload = 0, wire = 0, inter_node = 0;
  for (int j = 0; j < size(); ++j) {
    const int64_t block = bytes_of(send_counts[static_cast<size_t>(j)], dtype);
    payload += block;
    if (j != rank()) wire += block;
    if (j != rank() && crosses_to(j)) inter_node += block;
  }
  WorkHandle work = launch(CommOp::all_to_all_v, payload, wire, -1, dtype,
                           [&] { grouped_exchange(send, send_counts, recv, recv_counts, dtype); });
  stats_[CommOp::all_to_all_v].inter_node_wire_bytes += inter_node;  // per block: launch() cannot tell
  return work;
}

WorkHandle NcclCommunicator::isend(const void* buf, size_t count, DType dtype, int dst, int tag) {
  const ncclDataType_t type = nccl_type(dtype, false, CommOp::send, axis());
  const int64_t bytes = bytes_of(count, dtype);
  return launch(CommOp::send, bytes, comm_wire_bytes(CommOp::send, bytes, size()), dst, dtype, [&] {
    NDT_NCCL(ncclSend(buf, nccl_count(count, dtype, type), type, dst, state_->comm, state_->stream));
  });
}

WorkHandle NcclCommunicator::irecv(void* buf, size_t count, DType dtype, int src, int tag) {
  const ncclDataType_t type = nccl_type(dtype, false, CommOp::recv, axis());
  return launch(CommOp::recv, bytes_of(count, dtype), 0, -1, dtype, [&] {
    NDT_NCCL(ncclRecv(buf, nccl_count(count, dtype, type), type, src, state_->comm, state_->stream));
  });
}

WorkHandle NcclCommunicator::ibroadcast(void* buf, size_t count, DType dtype, int root) {
  const ncclDataType_t type = nccl_type(dtype, false, CommOp::broadcast, axis());
  const int64_t bytes = bytes_of(count, dtype);
  return launch(CommOp::broadcast, bytes, rank() == root ? bytes : 0, -1, dtype, [&] {
    NDT_NCCL(ncclBroadcast(buf, buf, nccl_count(count, dtype, type), type, root, state_->comm, state_->stream));
  });
}

// A barrier on the device: an all-reduce of one int, which completes only once every
// rank has reached it.
WorkHandle NcclCommunicator::ibarrier() {
  return launch(CommOp::barrier, 0, 0, -1, DType::i32, [&] {
    NDT_NCCL(ncclAllReduce(state_->barrier_word, state_->barrier_word, 1, ncclInt32, ncclSum, state_->comm,
                           state_->stream));
  });
}

void NcclCommunicator::grouped_exchange(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                        const std::vector<size_t>& recv_counts, DType dtype) {
  const ncclDataType_t type = nccl_type(dtype, false, CommOp::all_to_all_v, axis());
  const size_t element = dtype_size(dtype);
  size_t send_offset = 0, recv_offset = 0;
  NDT_NCCL(ncclGroupStart());
  for (int j = 0; j < size(); ++j) {
    const size_t sc = send_counts[static_cast<size_t>(j)], rc = recv_counts[static_cast<size_t>(j)];
    NDT_NCCL(ncclSend(static_cast<const char*>(send) + send_offset * element, nccl_count(sc, dtype, type), type, j,
                      state_->comm, state_->stream));
    NDT_NCCL(ncclRecv(static_cast<char*>(recv) + recv_offset * element, nccl_count(rc, dtype, type), type, j,
                      state_->comm, state_->stream));
    send_offset += sc;
    recv_offset += rc;
  }
  NDT_NCCL(ncclGroupEnd());
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key, const std::string& axis) {
  return std::make_unique<NcclCommunicator>(bootstrap_->split(color, key, axis));
}

std::unique_ptr<Communicator> NcclCommunicator::split_by_node(const std::string& axis) {
  return std::make_unique<NcclCommunicator>(bootstrap_->split_by_node(axis));
}

}  // namespace ndt
