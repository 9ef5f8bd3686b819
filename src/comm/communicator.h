// Communicator: collectives and point-to-point messages over one group of ranks (one
// mesh axis). Buffers are raw pointers with an element count and a DType, as in
// NCCL, so a GPU backend can implement the same interface without touching callers.
// Every call is counted (calls, payload bytes, the algorithm's per-rank wire bytes,
// time spent waiting) under the communicator's mesh-axis name, and every wait is
// watched (comm/watchdog.h): an operation that does not complete within the timeout
// aborts the job with a message naming the operation, the axis, the size and the
// training step.
//
// Threading: a communicator, its counters and its Works are used by one thread at a
// time (the backends' MPI thread level is "serialized", see comm/mpi_runtime.h).
// Lifetimes: a Work must complete (or be destroyed, which waits) before its
// communicator is destroyed, and its buffers must stay valid until then.
#pragma once

#include "core/dtype.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ndt {

enum class ReduceOp { sum, avg, max, min };

enum class CommOp : uint8_t {
  all_reduce,
  reduce_scatter,
  all_gather,
  all_to_all,
  all_to_all_v,
  send,
  recv,
  broadcast,
  barrier
};
inline constexpr size_t kNumCommOps = 9;
std::string_view comm_op_name(CommOp op);

// Counters of one communicator, per operation kind.
struct CommCounter {
  int64_t calls = 0;
  int64_t payload_bytes = 0;  // bytes of the caller's buffer (the message size)
  // The payload is: all_reduce the buffer; reduce_scatter the full (send) buffer of
  // n x recv_count elements; all_gather the full (recv) buffer of n x send_count
  // elements; all_to_all the send buffer (n x count_per_rank); all_to_all_v the send
  // buffer (sum of send_counts); send/recv/broadcast the buffer; barrier 0.
  // Bytes this rank sends under the algorithm's documented volume: all_reduce
  // 2(n-1)/n x payload (ring), reduce_scatter and all_gather (n-1)/n x the full
  // buffer, all_to_all (n-1)/n x payload, all_to_all_v the bytes of the blocks sent
  // to other ranks, send payload, recv 0, broadcast payload (root) / 0, barrier 0.
  // Integer arithmetic, rounded down: wire = factor_numerator * payload / n.
  int64_t wire_bytes = 0;
  // Of those, the bytes sent to a rank on another node (the group's member nodes set by
  // DeviceMesh: set_member_nodes). Ring-shaped operations (all_reduce, reduce_scatter,
  // all_gather, broadcast) send to the next rank of the group, so a rank whose next rank
  // is on another node sends all of its wire bytes across; all_to_all sends an equal
  // block to every other rank, all_to_all_v its blocks to the ranks on other nodes, send
  // to its peer.
  int64_t inter_node_wire_bytes = 0;
  double wait_seconds = 0;  // time blocked in wait() (or in a blocking call)
  // Time in a non-blocking call's start and its test() polls: MPI moves the operation's
  // data there, on the caller's core (Open MPI's non-blocking collectives copy in the
  // polls). MPI only; 0 for NCCL, whose work runs on the GPU.
  double progress_seconds = 0;
};

struct CommStats {
  std::array<CommCounter, kNumCommOps> ops{};
  const CommCounter& operator[](CommOp op) const { return ops[static_cast<size_t>(op)]; }
  CommCounter& operator[](CommOp op) { return ops[static_cast<size_t>(op)]; }
  int64_t total_wire_bytes() const;
  int64_t total_inter_node_wire_bytes() const;
  double total_wait_seconds() const;
  double total_progress_seconds() const;
};

// A non-blocking operation in flight. wait() blocks until done (subject to the
// timeout); test() makes progress and says whether it is done. Destroying a Work
// that is not done waits for it. Results (including the division of ReduceOp::avg)
// are in the buffers only once test() returned true or wait() returned.
//
// Progress: the MPI backend advances non-blocking operations only while the rank is
// inside an MPI call. Calling test() on any outstanding Work advances all of them, so
// a compute loop that overlaps communication should call test() often (about every
// millisecond). `ndtrain bench overlap` measures what that hides: on one node with one
// core per rank, little, since moving and summing the data is work for that same core.
class Work {
 public:
  virtual ~Work() = default;
  virtual bool test() = 0;
  virtual void wait() = 0;
};
using WorkHandle = std::unique_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The mesh axis this group spans ("world", "dp", "tp", ...), used in counters and errors.
  virtual const std::string& axis() const = 0;

  // Non-blocking collectives. Counts are in elements of dtype.
  // all_reduce: in place on buf[count].
  virtual WorkHandle iall_reduce(void* buf, size_t count, DType dtype, ReduceOp op) = 0;
  // reduce_scatter: send[size() * recv_count] -> recv[recv_count] (block rank() of the result).
  virtual WorkHandle ireduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                     ReduceOp op) = 0;
  // all_gather: send[send_count] from every rank -> recv[size() * send_count], rank order.
  virtual WorkHandle iall_gather(const void* send, void* recv, size_t send_count, DType dtype) = 0;
  // all_to_all: block j of send (count_per_rank elements) goes to rank j; block j of
  // recv comes from rank j.
  virtual WorkHandle iall_to_all(const void* send, void* recv, size_t count_per_rank, DType dtype) = 0;
  // all_to_all_v: as all_to_all with per-rank counts; blocks are packed in rank order.
  virtual WorkHandle iall_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                   const std::vector<size_t>& recv_counts, DType dtype) = 0;
  virtual WorkHandle isend(const void* buf, size_t count, DType dtype, int dst, int tag) = 0;
  virtual WorkHandle irecv(void* buf, size_t count, DType dtype, int src, int tag) = 0;
  virtual WorkHandle ibroadcast(void* buf, size_t count, DType dtype, int root) = 0;
  virtual WorkHandle ibarrier() = 0;

  // Blocking forms. By default the non-blocking call followed by wait(); a backend
  // may override them with its own blocking calls when those are faster (the MPI
  // backend does, see comm/mpi_communicator.h). Same semantics, counters and timeout.
  virtual void all_reduce(void* buf, size_t count, DType dtype, ReduceOp op);
  virtual void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op);
  virtual void all_gather(const void* send, void* recv, size_t send_count, DType dtype);
  virtual void all_to_all(const void* send, void* recv, size_t count_per_rank, DType dtype);
  virtual void all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                            const std::vector<size_t>& recv_counts, DType dtype);
  virtual void send(const void* buf, size_t count, DType dtype, int dst, int tag = 0);
  virtual void recv(void* buf, size_t count, DType dtype, int src, int tag = 0);
  virtual void broadcast(void* buf, size_t count, DType dtype, int root);
  virtual void barrier();

  // A new communicator over the ranks passing the same color, ordered by key, named
  // `axis` (collective over this communicator: every rank must call it).
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) = 0;
  // A new communicator over the ranks of this one that share its node (memory), ordered
  // as here (collective over this communicator).
  virtual std::unique_ptr<Communicator> split_by_node(const std::string& axis) = 0;

  // The ranks of this group on other hosts, as the timeout and error messages name them
  // ("ranks 2, 3 on host-b"): the peers a lost host or a cut link leaves unreachable.
  // Empty: the group is inside one node. Set by DeviceMesh.
  void set_peers_on_other_hosts(std::string text) { peers_on_other_hosts_ = std::move(text); }
  const std::string& peers_on_other_hosts() const { return peers_on_other_hosts_; }
  // The node of each member, in group rank order (set by DeviceMesh; unset: one node).
  void set_member_nodes(std::vector<int> nodes) { member_nodes_ = std::move(nodes); }
  bool crosses_to(int peer) const;  // peer is on another node than this rank

  CommStats& stats() { return stats_; }
  const CommStats& stats() const { return stats_; }

 protected:
  // The bytes of `wire` (this call's, of operation op) that cross nodes, as CommCounter
  // says; peer: send's destination.
  int64_t inter_node_bytes(CommOp op, int64_t wire, int peer = -1) const;

  CommStats stats_;
  std::string peers_on_other_hosts_;
  std::vector<int> member_nodes_;
};

// The training step shown in timeout messages (set by the trainer each step; -1,
// the default, means "not in a training step"). Process-wide, safe from any thread.
void set_comm_step(int64_t step);
int64_t comm_step();

// Wire bytes of one call under the formulas above, for the operations whose volume is
// a function of the payload: all_reduce, reduce_scatter, all_gather, all_to_all, send,
// recv, barrier (broadcast and all_to_all_v depend on more than the payload and are
// counted by the backend). group_size >= 1.
int64_t comm_wire_bytes(CommOp op, int64_t payload_bytes, int group_size);

}  // namespace ndt
