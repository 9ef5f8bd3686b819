// MpiCommunicator (see mpi_communicator.h). Each operation validates its arguments,
// counts itself, then calls MPI: the blocking form under a CommWaitGuard, the
// non-blocking form returning an MpiWork that waits under one. Work that must follow
// completion (avg's division, checking a received length) runs once, in whichever of
// the blocking call, Work::test or Work::wait sees the operation complete. The MPI
// datatypes and ops are in mpi_types.cpp, the ring reduce-scatter in ring_reduce_scatter.cpp.
#include "comm/mpi_communicator.h"

#include "comm/mpi_types.h"
#include "comm/ring_reduce_scatter.h"
#include "core/error.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <functional>

namespace ndt {

using mpi_detail::check_mpi;
using mpi_detail::divide;
using mpi_detail::reduction;
using mpi_detail::RingReduceScatterWork;
using mpi_detail::TimedProgress;
using mpi_detail::TimedWait;
using mpi_detail::use_ring_reduce_scatter;
using mpi_detail::where;

namespace {

// ---------------------------------------------------------------------------------------------
// Argument checks. `where` (mpi_types.h) is "all_reduce on mesh axis \"dp\"", prefixed to every
// message.

// Element counts go to MPI as int (MPI 3; Open MPI 4.1 has no large-count functions).
int mpi_count(CommOp what, const std::string& axis, size_t count) {
  NDT_CHECK(count <= static_cast<size_t>(INT_MAX),
            "{}: {} elements exceed INT_MAX ({}), the most one MPI call takes (Open MPI 4.1 has no "
            "large-count functions); split the buffer", where(what, axis), count, INT_MAX);
  return static_cast<int>(count);
}

// n * count elements, checked against INT_MAX (the whole buffer must be addressable by int
// displacements) without overflowing size_t.
void check_total(CommOp what, const std::string& axis, size_t count, int n) {
  NDT_CHECK(count <= static_cast<size_t>(INT_MAX) / static_cast<size_t>(n),
            "{}: {} x {} ranks = {} elements exceed INT_MAX ({}), the most one MPI call takes (Open MPI "
            "4.1 has no large-count functions); split the buffer", where(what, axis), count, n,
            static_cast<double>(count) * n, INT_MAX);
}

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

void check_no_overlap(CommOp what, const std::string& axis, const void* send, size_t send_bytes,
                      const void* recv, size_t recv_bytes) {
  NDT_CHECK(!overlap(send, send_bytes, recv, recv_bytes),
            "{}: the send buffer ({} bytes) and the receive buffer ({} bytes) overlap", where(what, axis),
            send_bytes, recv_bytes);
}

void check_peer(CommOp what, const std::string& axis, const char* role, int peer, int size) {
  NDT_CHECK(peer >= 0 && peer < size, "{}: {} rank {} is outside the group of {} ranks", where(what, axis),
            role, peer, size);
}

int tag_upper_bound() {
  static const int ub = [] {
    void* value = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &flag);
    return flag ? *static_cast<int*>(value) : 32767;
  }();
  return ub;
}

void check_tag(CommOp what, const std::string& axis, int tag) {
  NDT_CHECK(tag < 30000, "{}: tag {} is reserved (30000 and above carry ndtrain's ring reduce-scatters)",
            where(what, axis), tag);
  NDT_CHECK(tag >= 0 && tag <= tag_upper_bound(), "{}: tag {} is outside [0, {}] (MPI_TAG_UB)",
            where(what, axis), tag, tag_upper_bound());
}

void check_received(const MPI_Status& status, MPI_Datatype type, size_t expected, DType dtype, int src,
                    int tag, const std::string& axis) {
  int got = 0;
  MPI_Get_count(&status, type, &got);
  NDT_CHECK(static_cast<size_t>(got) == expected,
            "{}: expected {} elements of {} from rank {} (tag {}) but the message held {}",
            where(CommOp::recv, axis), expected, dtype_name(dtype), src, tag, got);
}

// A non-blocking MPI operation. Holds what MPI needs until completion (v-counts), and
// what runs after it (finish).
class MpiWork final : public Work {
 public:
  MpiWork(CommCounter& counter, CommOp op, const std::string& axis, int64_t bytes, DType dtype,
          const std::string& peers)
      : counter_(counter), op_(op), axis_(axis), peers_(peers), bytes_(bytes), dtype_(dtype) {}

  ~MpiWork() override {
    if (done_ || request == MPI_REQUEST_NULL) return;  // complete, or never started (the MPI_I* call failed)
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    try {
      wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ndtrain: %s completed in a Work's destructor failed: %s\n",
                   where(op_, axis_).c_str(), e.what());
      std::abort();
    }
  }

  bool test() override {
    if (done_) return true;
    int flag = 0;
    int rc = MPI_SUCCESS;
    {
      TimedProgress timed(counter_);
      rc = MPI_Test(&request, &flag, &status_);
    }
    if (rc != MPI_SUCCESS) failed(rc);
    if (flag) complete();
    return done_;
  }

  void wait() override {
    if (done_) return;
    {
      TimedWait timed(counter_, op_, axis_, bytes_, dtype_, peers_);
      const int rc = MPI_Wait(&request, &status_);
      if (rc != MPI_SUCCESS) failed(rc);
    }
    complete();
  }

  void set_size(int64_t bytes) { bytes_ = bytes; }  // for the timeout message

  MPI_Request request = MPI_REQUEST_NULL;
  std::function<void(const MPI_Status&)> finish;  // runs once, after completion
  std::vector<int> counts[4];                     // all_to_all_v: send counts/displs, recv counts/displs

 private:
  // An error completes the request (MPI frees it): the Work is done, with the error.
  [[noreturn]] void failed(int rc) {
    done_ = true;
    check_mpi(rc, op_, axis_, peers_);
    fail("{}: MPI error {}", where(op_, axis_), rc);
  }

  void complete() {
    done_ = true;
    if (finish) finish(status_);
  }

  CommCounter& counter_;
  CommOp op_;
  std::string axis_;
  std::string peers_;  // the group's ranks on other hosts, for messages
  int64_t bytes_;
  DType dtype_;
  MPI_Status status_{};
  bool done_ = false;
};

void count_call(CommCounter& c, int64_t payload, int64_t wire, int64_t inter_node = 0) {
  c.calls += 1;
  c.payload_bytes += payload;
  c.wire_bytes += wire;
  c.inter_node_wire_bytes += inter_node;
}

// all_to_all_v's counts and displacements as MPI ints, checked against INT_MAX.
void v_layout(CommOp what, const std::string& axis, const char* name, const std::vector<size_t>& counts,
              int n, std::vector<int>& out_counts, std::vector<int>& out_displs, size_t& total) {
  NDT_CHECK(counts.size() == static_cast<size_t>(n), "{}: {} has {} entries for a group of {} ranks",
            where(what, axis), name, counts.size(), n);
  out_counts.resize(n);
  out_displs.resize(n);
  total = 0;
  for (int j = 0; j < n; ++j) {
    out_displs[j] = mpi_count(what, axis, total);
    out_counts[j] = mpi_count(what, axis, counts[j]);
    total += counts[j];
  }
  mpi_count(what, axis, total);
}

}  // namespace

// =============================================================================================

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string axis, bool owned)
    : comm_(comm), axis_(std::move(axis)), owned_(owned) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

MpiCommunicator::~MpiCommunicator() {
  if (!owned_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
}

std::unique_ptr<MpiCommunicator> mpi_world(const std::string& axis) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  NDT_CHECK(initialized, "mpi_world(\"{}\"): MPI is not initialised (construct an MpiRuntime first)", axis);
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  return std::make_unique<MpiCommunicator>(dup, axis, true);
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& axis) {
  NDT_CHECK(color >= 0, "split of mesh axis \"{}\" into \"{}\": color {} must be non-negative", axis_, axis,
            color);
  MPI_Comm out = MPI_COMM_NULL;
  const int rc = MPI_Comm_split(comm_, color, key, &out);
  NDT_CHECK(rc == MPI_SUCCESS, "split of mesh axis \"{}\" into \"{}\" failed with MPI error {}", axis_, axis, rc);
  return std::make_unique<MpiCommunicator>(out, axis, true);
}

std::unique_ptr<Communicator> MpiCommunicator::split_by_node(const std::string& axis) {
  MPI_Comm out = MPI_COMM_NULL;
  const int rc = MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &out);
  NDT_CHECK(rc == MPI_SUCCESS, "split of mesh axis \"{}\" by node into \"{}\" failed with MPI error {}", axis_, axis,
            rc);
  return std::make_unique<MpiCommunicator>(out, axis, true);
}

// ---------------------------------------------------------------------------------------------
// Each operation is written once, as `start_*(..., blocking)`: the checks and the
// counters, then run() issues either MPI's blocking call under the watchdog (the fast
// path for blocking forms here) or its non-blocking one wrapped in a Work. `after`
// runs once the operation is complete (avg's division, a received message's check).

std::function<void(const MPI_Status&)> MpiCommunicator::averaging(ReduceOp op, void* buf, size_t count,
                                                                 DType dtype) const {
  if (op != ReduceOp::avg) return {};
  return [buf, count, dtype, size = size_](const MPI_Status&) { divide(buf, count, dtype, size); };
}

WorkHandle MpiCommunicator::run(CommOp op, int64_t bytes, DType dtype, bool blocking,
                                const std::function<int(MPI_Request*)>& call,
                                std::function<void(const MPI_Status&)> after) {
  if (blocking) {
    MPI_Status status{};
    {
      TimedWait timed(stats_[op], op, axis_, bytes, dtype, peers_on_other_hosts());
      check_mpi(call(nullptr), op, axis_, peers_on_other_hosts());
    }
    if (after) after(status);
    return nullptr;
  }
  auto work = std::make_unique<MpiWork>(stats_[op], op, axis_, bytes, dtype, peers_on_other_hosts());
  int rc = MPI_SUCCESS;
  {
    TimedProgress timed(stats_[op]);
    rc = call(&work->request);
  }
  check_mpi(rc, op, axis_, peers_on_other_hosts());
  work->finish = std::move(after);
  return work;
}

void MpiCommunicator::count_op(CommOp op, int64_t payload, int64_t wire, int peer) {
  count_call(stats_[op], payload, wire, inter_node_bytes(op, wire, peer));
}

void MpiCommunicator::count_v(CommOp op, int64_t payload, const std::vector<size_t>& send_counts, size_t element) {
  int64_t wire = 0, inter = 0;
  for (int j = 0; j < size_; ++j) {
    if (j == rank_) continue;
    const auto bytes = static_cast<int64_t>(send_counts[static_cast<size_t>(j)] * element);
    wire += bytes;
    if (crosses_to(j)) inter += bytes;
  }
  count_call(stats_[op], payload, wire, inter);
}

// all_reduce, in place.
WorkHandle MpiCommunicator::start_all_reduce(void* buf, size_t count, DType dtype, ReduceOp op, bool blocking) {
  constexpr CommOp kOp = CommOp::all_reduce;
  const MPI_Op mop = reduction(kOp, axis_, dtype, op);
  const int n = mpi_count(kOp, axis_, count);
  const auto bytes = static_cast<int64_t>(count * dtype_size(dtype));
  count_op(kOp, bytes, comm_wire_bytes(kOp, bytes, size_));
  const MPI_Datatype type = mpi_datatype(dtype);
  return run(kOp, bytes, dtype, blocking,
             [&](MPI_Request* r) {
               return r ? MPI_Iallreduce(MPI_IN_PLACE, buf, n, type, mop, comm_, r)
                        : MPI_Allreduce(MPI_IN_PLACE, buf, n, type, mop, comm_);
             },
             averaging(op, buf, count, dtype));
}

// reduce_scatter (send[size * recv_count] -> recv[recv_count]); buffers must not overlap.
WorkHandle MpiCommunicator::start_reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                                 ReduceOp op, bool blocking) {
  constexpr CommOp kOp = CommOp::reduce_scatter;
  const MPI_Op mop = reduction(kOp, axis_, dtype, op);
  check_total(kOp, axis_, recv_count, size_);
  const size_t block = recv_count * dtype_size(dtype);
  check_no_overlap(kOp, axis_, send, block * size_, recv, block);
  const auto bytes = static_cast<int64_t>(block * size_);
  count_op(kOp, bytes, comm_wire_bytes(kOp, bytes, size_));
  if (use_ring_reduce_scatter(dtype, op, bytes)) {
    std::unique_ptr<RingReduceScatterWork> ring;
    {
      TimedProgress timed(stats_[kOp]);
      ring = std::make_unique<RingReduceScatterWork>(stats_[kOp], axis_, comm_, rank_, size_, next_ring_tag(),
                                                     static_cast<const float*>(send), static_cast<float*>(recv),
                                                     recv_count, op == ReduceOp::avg);
    }
    if (!blocking) return ring;
    ring->wait();
    return nullptr;
  }
  const MPI_Datatype type = mpi_datatype(dtype);
  const int n = static_cast<int>(recv_count);
  return run(kOp, bytes, dtype, blocking,
             [&](MPI_Request* r) {
               return r ? MPI_Ireduce_scatter_block(send, recv, n, type, mop, comm_, r)
                        : MPI_Reduce_scatter_block(send, recv, n, type, mop, comm_);
             },
             averaging(op, recv, recv_count, dtype));
}

// all_gather (send[send_count] -> recv[size * send_count]). In place when send is this
// rank's block of recv (as NCCL allows): passed to MPI as MPI_IN_PLACE.
WorkHandle MpiCommunicator::start_all_gather(const void* send, void* recv, size_t send_count, DType dtype,
                                             bool blocking) {
  constexpr CommOp kOp = CommOp::all_gather;
  check_total(kOp, axis_, send_count, size_);
  const size_t block = send_count * dtype_size(dtype);
  const void* src = MPI_IN_PLACE;
  if (!(block > 0 && send == static_cast<const char*>(recv) + block * rank_)) {
    check_no_overlap(kOp, axis_, send, block, recv, block * size_);
    src = send;
  }
  const auto bytes = static_cast<int64_t>(block * size_);
  count_op(kOp, bytes, comm_wire_bytes(kOp, bytes, size_));
  const MPI_Datatype type = mpi_datatype(dtype);
  const int n = static_cast<int>(send_count);
  return run(kOp, bytes, dtype, blocking, [&](MPI_Request* r) {
    return r ? MPI_Iallgather(src, n, type, recv, n, type, comm_, r) : MPI_Allgather(src, n, type, recv, n, type, comm_);
  });
}

// all_to_all; buffers must not overlap.
WorkHandle MpiCommunicator::start_all_to_all(const void* send, void* recv, size_t count_per_rank, DType dtype,
                                             bool blocking) {
  constexpr CommOp kOp = CommOp::all_to_all;
  check_total(kOp, axis_, count_per_rank, size_);
  const size_t total = count_per_rank * dtype_size(dtype) * size_;
  check_no_overlap(kOp, axis_, send, total, recv, total);
  const auto bytes = static_cast<int64_t>(total);
  count_op(kOp, bytes, comm_wire_bytes(kOp, bytes, size_));
  const MPI_Datatype type = mpi_datatype(dtype);
  const int n = static_cast<int>(count_per_rank);
  return run(kOp, bytes, dtype, blocking, [&](MPI_Request* r) {
    return r ? MPI_Ialltoall(send, n, type, recv, n, type, comm_, r) : MPI_Alltoall(send, n, type, recv, n, type, comm_);
  });
}

WorkHandle MpiCommunicator::iall_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  return start_all_reduce(buf, count, dtype, op, false);
}
void MpiCommunicator::all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  start_all_reduce(buf, count, dtype, op, true);
}
WorkHandle MpiCommunicator::ireduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                            ReduceOp op) {
  return start_reduce_scatter(send, recv, recv_count, dtype, op, false);
}
void MpiCommunicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op) {
  start_reduce_scatter(send, recv, recv_count, dtype, op, true);
}
WorkHandle MpiCommunicator::iall_gather(const void* send, void* recv, size_t send_count, DType dtype) {
  return start_all_gather(send, recv, send_count, dtype, false);
}
void MpiCommunicator::all_gather(const void* send, void* recv, size_t send_count, DType dtype) {
  start_all_gather(send, recv, send_count, dtype, true);
}
WorkHandle MpiCommunicator::iall_to_all(const void* send, void* recv, size_t count_per_rank, DType dtype) {
  return start_all_to_all(send, recv, count_per_rank, dtype, false);
}
void MpiCommunicator::all_to_all(const void* send, void* recv, size_t count_per_rank, DType dtype) {
  start_all_to_all(send, recv, count_per_rank, dtype, true);
}

WorkHandle MpiCommunicator::iall_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                          const std::vector<size_t>& recv_counts, DType dtype) {
  constexpr CommOp kOp = CommOp::all_to_all_v;
  auto work = std::make_unique<MpiWork>(stats_[kOp], kOp, axis_, 0, dtype, peers_on_other_hosts());
  size_t send_total = 0, recv_total = 0;
  v_layout(kOp, axis_, "send_counts", send_counts, size_, work->counts[0], work->counts[1], send_total);
  v_layout(kOp, axis_, "recv_counts", recv_counts, size_, work->counts[2], work->counts[3], recv_total);
  const size_t es = dtype_size(dtype);
  check_no_overlap(kOp, axis_, send, send_total * es, recv, recv_total * es);
  const auto bytes = static_cast<int64_t>(send_total * es);
  count_v(kOp, bytes, send_counts, es);
  work->set_size(bytes);
  const MPI_Datatype type = mpi_datatype(dtype);
  check_mpi(MPI_Ialltoallv(send, work->counts[0].data(), work->counts[1].data(), type, recv,
                           work->counts[2].data(), work->counts[3].data(), type, comm_, &work->request),
            kOp, axis_);
  return work;
}

void MpiCommunicator::all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                   const std::vector<size_t>& recv_counts, DType dtype) {
  constexpr CommOp kOp = CommOp::all_to_all_v;
  std::vector<int> sc, sd, rc, rd;
  size_t send_total = 0, recv_total = 0;
  v_layout(kOp, axis_, "send_counts", send_counts, size_, sc, sd, send_total);
  v_layout(kOp, axis_, "recv_counts", recv_counts, size_, rc, rd, recv_total);
  const size_t es = dtype_size(dtype);
  check_no_overlap(kOp, axis_, send, send_total * es, recv, recv_total * es);
  const auto bytes = static_cast<int64_t>(send_total * es);
  count_v(kOp, bytes, send_counts, es);
  const MPI_Datatype type = mpi_datatype(dtype);
  TimedWait timed(stats_[kOp], kOp, axis_, bytes, dtype, peers_on_other_hosts());
  check_mpi(MPI_Alltoallv(send, sc.data(), sd.data(), type, recv, rc.data(), rd.data(), type, comm_), kOp, axis_);
}

// ---------------------------------------------------------------------------------------------
// send / recv, broadcast, barrier

WorkHandle MpiCommunicator::start_send(const void* buf, size_t count, DType dtype, int dst, int tag, bool blocking) {
  constexpr CommOp kOp = CommOp::send;
  check_peer(kOp, axis_, "destination", dst, size_);
  check_tag(kOp, axis_, tag);
  const int n = mpi_count(kOp, axis_, count);
  const auto bytes = static_cast<int64_t>(count * dtype_size(dtype));
  count_op(kOp, bytes, comm_wire_bytes(kOp, bytes, size_), dst);
  const MPI_Datatype type = mpi_datatype(dtype);
  return run(kOp, bytes, dtype, blocking, [&](MPI_Request* r) {
    return r ? MPI_Isend(buf, n, type, dst, tag, comm_, r) : MPI_Send(buf, n, type, dst, tag, comm_);
  });
}

WorkHandle MpiCommunicator::start_recv(void* buf, size_t count, DType dtype, int src, int tag, bool blocking) {
  constexpr CommOp kOp = CommOp::recv;
  check_peer(kOp, axis_, "source", src, size_);
  check_tag(kOp, axis_, tag);
  const int n = mpi_count(kOp, axis_, count);
  const auto bytes = static_cast<int64_t>(count * dtype_size(dtype));
  count_call(stats_[kOp], bytes, 0);
  const MPI_Datatype type = mpi_datatype(dtype);
  // The blocking call writes its status where run() hands it to `after`.
  auto status = std::make_shared<MPI_Status>();
  return run(
      kOp, bytes, dtype, blocking,
      [&](MPI_Request* r) {
        return r ? MPI_Irecv(buf, n, type, src, tag, comm_, r) : MPI_Recv(buf, n, type, src, tag, comm_, status.get());
      },
      [type, count, dtype, src, tag, axis = axis_, status, blocking](const MPI_Status& completed) {
        check_received(blocking ? *status : completed, type, count, dtype, src, tag, axis);
      });
}

WorkHandle MpiCommunicator::start_broadcast(void* buf, size_t count, DType dtype, int root, bool blocking) {
  constexpr CommOp kOp = CommOp::broadcast;
  check_peer(kOp, axis_, "root", root, size_);
  const int n = mpi_count(kOp, axis_, count);
  const auto bytes = static_cast<int64_t>(count * dtype_size(dtype));
  count_op(kOp, bytes, rank_ == root ? bytes : 0);
  const MPI_Datatype type = mpi_datatype(dtype);
  return run(kOp, bytes, dtype, blocking, [&](MPI_Request* r) {
    return r ? MPI_Ibcast(buf, n, type, root, comm_, r) : MPI_Bcast(buf, n, type, root, comm_);
  });
}

WorkHandle MpiCommunicator::start_barrier(bool blocking) {
  constexpr CommOp kOp = CommOp::barrier;
  count_call(stats_[kOp], 0, 0);
  return run(kOp, 0, DType::f32, blocking,
             [&](MPI_Request* r) { return r ? MPI_Ibarrier(comm_, r) : MPI_Barrier(comm_); });
}

WorkHandle MpiCommunicator::isend(const void* buf, size_t count, DType dtype, int dst, int tag) {
  return start_send(buf, count, dtype, dst, tag, false);
}
void MpiCommunicator::send(const void* buf, size_t count, DType dtype, int dst, int tag) {
  start_send(buf, count, dtype, dst, tag, true);
}
WorkHandle MpiCommunicator::irecv(void* buf, size_t count, DType dtype, int src, int tag) {
  return start_recv(buf, count, dtype, src, tag, false);
}
void MpiCommunicator::recv(void* buf, size_t count, DType dtype, int src, int tag) {
  start_recv(buf, count, dtype, src, tag, true);
}
WorkHandle MpiCommunicator::ibroadcast(void* buf, size_t count, DType dtype, int root) {
  return start_broadcast(buf, count, dtype, root, false);
}
void MpiCommunicator::broadcast(void* buf, size_t count, DType dtype, int root) {
  start_broadcast(buf, count, dtype, root, true);
}
WorkHandle MpiCommunicator::ibarrier() { return start_barrier(false); }
void MpiCommunicator::barrier() { start_barrier(true); }

}  // namespace ndt
