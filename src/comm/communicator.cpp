// Backend-independent parts of the Communicator: operation names, counter totals, the
// wire-volume formulas, the process-wide training step shown in timeout messages, and
// the default blocking forms (the non-blocking call followed by wait(), so a backend
// gets them for free and overrides only where its own blocking calls are faster).
#include "comm/communicator.h"

#include "core/error.h"

#include <atomic>

namespace ndt {

std::string_view comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_reduce: return "all_reduce";
    case CommOp::reduce_scatter: return "reduce_scatter";
    case CommOp::all_gather: return "all_gather";
    case CommOp::all_to_all: return "all_to_all";
    case CommOp::all_to_all_v: return "all_to_all_v";
    case CommOp::send: return "send";
    case CommOp::recv: return "recv";
    case CommOp::broadcast: return "broadcast";
    case CommOp::barrier: return "barrier";
  }
  return "?";
}

int64_t CommStats::total_wire_bytes() const {
  int64_t total = 0;
  for (const CommCounter& c : ops) total += c.wire_bytes;
  return total;
}

int64_t CommStats::total_inter_node_wire_bytes() const {
  int64_t total = 0;
  for (const CommCounter& c : ops) total += c.inter_node_wire_bytes;
  return total;
}

bool Communicator::crosses_to(int peer) const {
  if (member_nodes_.empty()) return false;
  return member_nodes_.at(static_cast<size_t>(peer)) != member_nodes_.at(static_cast<size_t>(rank()));
}

int64_t Communicator::inter_node_bytes(CommOp op, int64_t wire, int peer) const {
  if (member_nodes_.empty() || wire == 0) return 0;
  const int n = size(), me = rank();
  switch (op) {
    case CommOp::all_reduce:
    case CommOp::reduce_scatter:
    case CommOp::all_gather:
    case CommOp::broadcast: return crosses_to((me + 1) % n) ? wire : 0;
    case CommOp::all_to_all: {
      int others = 0;
      for (int r = 0; r < n; ++r) others += crosses_to(r);
      return n > 1 ? wire * others / (n - 1) : 0;
    }
    case CommOp::send: return crosses_to(peer) ? wire : 0;
    case CommOp::all_to_all_v:  // counted by the backend, block by block
    case CommOp::recv:
    case CommOp::barrier: return 0;
  }
  return 0;
}

double CommStats::total_wait_seconds() const {
  double total = 0;
  for (const CommCounter& c : ops) total += c.wait_seconds;
  return total;
}

double CommStats::total_progress_seconds() const {
  double total = 0;
  for (const CommCounter& c : ops) total += c.progress_seconds;
  return total;
}

int64_t comm_wire_bytes(CommOp op, int64_t payload_bytes, int group_size) {
  NDT_CHECK(group_size >= 1, "communicator group size {} must be at least 1", group_size);
  const int64_t n = group_size;
  switch (op) {
    case CommOp::all_reduce: return 2 * (n - 1) * payload_bytes / n;
    case CommOp::reduce_scatter:
    case CommOp::all_gather:
    case CommOp::all_to_all: return (n - 1) * payload_bytes / n;
    case CommOp::send: return payload_bytes;
    case CommOp::recv:
    case CommOp::barrier: return 0;
    case CommOp::broadcast:
    case CommOp::all_to_all_v: break;
  }
  fail("comm_wire_bytes: the wire volume of {} is not a function of its payload", comm_op_name(op));
}

namespace {
std::atomic<int64_t> g_step{-1};
}  // namespace

void set_comm_step(int64_t step) { g_step.store(step, std::memory_order_relaxed); }
int64_t comm_step() { return g_step.load(std::memory_order_relaxed); }

// Default blocking forms: the non-blocking call and its wait (which the backend's Work
// times and watches).

void Communicator::all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  iall_reduce(buf, count, dtype, op)->wait();
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op) {
  ireduce_scatter(send, recv, recv_count, dtype, op)->wait();
}

void Communicator::all_gather(const void* send, void* recv, size_t send_count, DType dtype) {
  iall_gather(send, recv, send_count, dtype)->wait();
}

void Communicator::all_to_all(const void* send, void* recv, size_t count_per_rank, DType dtype) {
  iall_to_all(send, recv, count_per_rank, dtype)->wait();
}

void Communicator::all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                const std::vector<size_t>& recv_counts, DType dtype) {
  iall_to_all_v(send, send_counts, recv, recv_counts, dtype)->wait();
}

void Communicator::send(const void* buf, size_t count, DType dtype, int dst, int tag) {
  isend(buf, count, dtype, dst, tag)->wait();
}

void Communicator::recv(void* buf, size_t count, DType dtype, int src, int tag) {
  irecv(buf, count, dtype, src, tag)->wait();
}

void Communicator::broadcast(void* buf, size_t count, DType dtype, int root) {
  ibroadcast(buf, count, dtype, root)->wait();
}

void Communicator::barrier() { ibarrier()->wait(); }

}  // namespace ndt
