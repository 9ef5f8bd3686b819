#include "parallel/tp_regions.h"

namespace ndt {

namespace {

void all_gather_rows(const TensorParallel& tp, const float* x, float* full, int64_t local_rows, int64_t C) {
  tp.comm->all_gather(x, full, static_cast<size_t>(local_rows * C), DType::f32);
}

void reduce_scatter_rows(const TensorParallel& tp, const float* full, float* x, int64_t local_rows, int64_t C) {
  tp.comm->reduce_scatter(full, x, static_cast<size_t>(local_rows * C), DType::f32, ReduceOp::sum);
}

}  // namespace

const float* region_entry_forward(const TensorParallel& tp, const float* x, float* full, int64_t local_rows,
                                  int64_t C) {
  if (!tp.splits_rows()) return x;
  all_gather_rows(tp, x, full, local_rows, C);
  return full;
}

float* region_entry_backward(const TensorParallel& tp, float* dfull, float* dx, int64_t local_rows, int64_t C) {
  if (!tp.active()) return dfull;
  if (!tp.sequence_parallel) {
    tp.comm->all_reduce(dfull, static_cast<size_t>(local_rows * C), DType::f32, ReduceOp::sum);
    return dfull;
  }
  reduce_scatter_rows(tp, dfull, dx, local_rows, C);
  return dx;
}

float* region_exit_forward(const TensorParallel& tp, float* partial, float* y, int64_t local_rows, int64_t C) {
  return region_entry_backward(tp, partial, y, local_rows, C);  // the same reduction
}

const float* region_exit_backward(const TensorParallel& tp, const float* dy, float* dfull, int64_t local_rows,
                                  int64_t C) {
  return region_entry_forward(tp, dy, dfull, local_rows, C);  // the same gather
}

void tp_all_reduce(const TensorParallel& tp, float* x, int64_t n, ReduceOp op) {
  if (tp.active()) tp.comm->all_reduce(x, static_cast<size_t>(n), DType::f32, op);
}

}  // namespace ndt
