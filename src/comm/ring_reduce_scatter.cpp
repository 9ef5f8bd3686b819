// The ring reduce-scatter (see ring_reduce_scatter.h): one MPI_Irecv from the previous
// rank and one MPI_Isend to the next per step, this rank's part added in place into the
// received partial once both are done, in whichever of the constructor, Work::test or
// Work::wait sees that. The constructor's and test()'s time count as the counter's
// progress, wait()'s as its wait.
#include "comm/ring_reduce_scatter.h"

#include "comm/mpi_types.h"

#include <cstring>

namespace ndt::mpi_detail {

RingReduceScatterWork::RingReduceScatterWork(CommCounter& counter, const std::string& axis, MPI_Comm comm, int rank,
                                             int size, int tag, const float* send, float* recv, size_t block,
                                             bool average)
    : counter_(counter), axis_(axis), comm_(comm), rank_(rank), size_(size), tag_(tag), send_(send), recv_(recv),
      block_(block), average_(average) {
  if (size_ == 1) {
    std::memcpy(recv_, send_, block_ * sizeof(float));
    finish();
    return;
  }
  // Partials alternate between recv and one scratch block, so that the last step's
  // lands in recv; two ranks have one step and need no scratch.
  if (size_ > 2) scratch_ = Tensor::empty({static_cast<int64_t>(block)}, DType::f32, MemTag::comm);
  post();
}

RingReduceScatterWork::~RingReduceScatterWork() {
  if (done_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) wait();
}

bool RingReduceScatterWork::test() {
  TimedProgress timed(counter_);  // driving the ring, its sums included (as MpiWork::test)
  while (!done_) {
    int flag = 0;
    check_mpi(MPI_Testall(2, requests_, &flag, MPI_STATUSES_IGNORE), CommOp::reduce_scatter, axis_);
    if (!flag) return false;
    advance();
  }
  return true;
}

void RingReduceScatterWork::wait() {
  if (done_) return;
  TimedWait timed(counter_, CommOp::reduce_scatter, axis_, static_cast<int64_t>(block_ * size_ * 4), DType::f32);
  while (!done_) {
    check_mpi(MPI_Waitall(2, requests_, MPI_STATUSES_IGNORE), CommOp::reduce_scatter, axis_);
    advance();
  }
}

const float* RingReduceScatterWork::own_block(int offset) const {
  const int b = ((rank_ - step_ - offset) % size_ + size_) % size_;
  return send_ + static_cast<size_t>(b) * block_;
}

float* RingReduceScatterWork::partial_of_step(int step) const {
  return (size_ - 2 - step) % 2 == 0 ? recv_ : scratch_.data<float>();
}

void RingReduceScatterWork::post() {
  const int next = (rank_ + 1) % size_, prev = (rank_ - 1 + size_) % size_;
  const int count = static_cast<int>(block_);
  // Step 0 sends this rank's own block straight from send; later steps the partial
  // that the step before received.
  const float* outgoing = step_ == 0 ? own_block(1) : partial_of_step(step_ - 1);
  check_mpi(MPI_Irecv(partial_of_step(step_), count, MPI_FLOAT, prev, tag_, comm_, &requests_[0]),
            CommOp::reduce_scatter, axis_);
  check_mpi(MPI_Isend(outgoing, count, MPI_FLOAT, next, tag_, comm_, &requests_[1]), CommOp::reduce_scatter, axis_);
}

void RingReduceScatterWork::advance() {
  const float* mine = own_block(2);
  float* partial = partial_of_step(step_);
#pragma omp parallel for simd schedule(static) if (block_ >= 65536)
  for (size_t i = 0; i < block_; ++i) partial[i] += mine[i];
  if (++step_ < size_ - 1) return post();
  finish();
}

void RingReduceScatterWork::finish() {
  if (average_) divide(recv_, block_, DType::f32, size_);
  scratch_ = Tensor();
  done_ = true;
}

}  // namespace ndt::mpi_detail
