// ndtrain's own reduce-scatter of f32 sums (and averages) as a ring of non-blocking
// point-to-point steps, which MpiCommunicator uses instead of MPI_Reduce_scatter_block
// from a few MiB on: Open MPI 4.1's reduce_scatter_block (every tuned algorithm, and
// libnbc's) is several times slower than its all-reduce on shared memory (measured:
// 64 MiB over 2 ranks, 55-58 ms against 17 ms for this ring, which sends the same
// (n-1)/n of the buffer). Internal to comm/ (namespace ndt::mpi_detail).
#pragma once

#include "comm/communicator.h"
#include "comm/mpi_headers.h"
#include "core/dtype.h"
#include "core/tensor.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace ndt::mpi_detail {

// Step s (0 .. n-2): send the running partial of block (r - s - 1) mod n to rank r + 1
// (at step 0 this rank's own block, straight from send), receive the partial of block
// (r - s - 2) mod n from rank r - 1 and add this rank's part of it in place; after n - 1
// steps the partial is block r, summed over all ranks, and it was received into recv. Each
// ring uses its own tag (from a per-communicator sequence, the same on every rank as
// collectives are called in the same order), so several rings may be in flight.
class RingReduceScatterWork final : public Work {
 public:
  RingReduceScatterWork(CommCounter& counter, const std::string& axis, MPI_Comm comm, int rank, int size, int tag,
                        const float* send, float* recv, size_t block, bool average);
  ~RingReduceScatterWork() override;

  bool test() override;
  void wait() override;

 private:
  // This rank's part of block (rank - step - offset) mod n.
  const float* own_block(int offset) const;
  // Where step `step` receives (and then completes) its partial: recv or scratch_, in
  // turn, so that the last step's is recv.
  float* partial_of_step(int step) const;
  void post();
  // Both messages of the current step are done: fold the incoming partial into ours.
  void advance();
  void finish();

  CommCounter& counter_;
  std::string axis_;
  MPI_Comm comm_;
  int rank_, size_, tag_;
  const float* send_;
  float* recv_;
  size_t block_;
  bool average_;
  Tensor scratch_;  // only for more than two ranks
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int step_ = 0;
  bool done_ = false;
};

// The ring wins from a few MiB on (at 1 MiB Open MPI's own call is slightly faster).
inline bool use_ring_reduce_scatter(DType dtype, ReduceOp op, int64_t payload_bytes) {
  return dtype == DType::f32 && op != ReduceOp::max && payload_bytes >= (int64_t{2} << 20);
}

}  // namespace ndt::mpi_detail
