#include "parallel/tensor/megatron_regions.h"

namespace ndt {

void copy_to_tp_region_backward(const TensorParallel& tp, float* grad, int64_t n) {
  tp_all_reduce(tp, grad, n, ReduceOp::sum);
}

void reduce_from_tp_region_forward(const TensorParallel& tp, float* x, int64_t n) {
  tp_all_reduce(tp, x, n, ReduceOp::sum);
}

void gather_from_sequence_region_forward(const TensorParallel& tp, const float* shard, float* full,
                                         int64_t shard_numel) {
  tp.comm->all_gather(shard, full, static_cast<size_t>(shard_numel), DType::f32);
}

void gather_from_sequence_region_backward(const TensorParallel& tp, const float* dfull, float* dshard,
                                          int64_t shard_numel) {
  tp.comm->reduce_scatter(dfull, dshard, static_cast<size_t>(shard_numel), DType::f32, ReduceOp::sum);
}

void reduce_scatter_to_sequence_region_forward(const TensorParallel& tp, const float* full, float* shard,
                                               int64_t shard_numel) {
  gather_from_sequence_region_backward(tp, full, shard, shard_numel);  // the same reduce-scatter
}

void reduce_scatter_to_sequence_region_backward(const TensorParallel& tp, const float* dshard, float* dfull,
                                                int64_t shard_numel) {
  gather_from_sequence_region_forward(tp, dshard, dfull, shard_numel);  // the same all-gather
}

void tp_all_reduce(const TensorParallel& tp, float* x, int64_t n, ReduceOp op) {
  if (tp.active()) tp.comm->all_reduce(x, static_cast<size_t>(n), DType::f32, op);
}

}  // namespace ndt
