// The Megatron communication operators of tensor parallelism, kept apart from the
// layers that use them. A tensor-parallel region is the stretch between a column-
// parallel layer's input and a row-parallel layer's output, where each tp rank holds
// a slice of the features (heads, MLP hidden units).
//
// Splits: nothing itself; it moves activations [rows, C] in and out of regions.
// Communicates, over the tp axis, per region:
//   without sequence parallel (activations outside regions replicated, all rows):
//     in:  copy-to-region                     forward identity,       backward all-reduce
//     out: reduce-from-region                 forward all-reduce,     backward identity
//   with sequence parallel (activations outside regions split by rows, rows / tp each):
//     in:  gather-from-sequence-region        forward all-gather,     backward reduce-scatter
//     out: reduce-scatter-to-sequence-region  forward reduce-scatter, backward all-gather
// Both variants move the same volume: an all-gather plus a reduce-scatter is one
// all-reduce. The rows split under sequence parallel are the flattened B x T tokens,
// contiguous blocks in rank order (the layout in which an all-gather of row blocks
// is the whole tensor, as Megatron's [s, b, h] order is for it).
#pragma once

#include "comm/communicator.h"
#include "model/tensor_parallel_regions.h"

#include <cstdint>

namespace ndt {

// The tensor-parallel group a model runs on. comm == nullptr means tp = 1 (every
// operator is then the identity).
struct TensorParallel {
  Communicator* comm = nullptr;
  bool sequence_parallel = false;

  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }
  bool active() const { return size() > 1; }
  ActivationLayout layout() const { return {size(), sequence_parallel, {}}; }
  bool splits_rows() const { return layout().splits_rows(); }
  int64_t local_rows(int64_t rows) const { return layout().local_rows(rows); }
};

// The four operators, each direction that communicates (the others are the identity).
// Sizes are in floats; a "shard" is one rank's rows, [local_rows, C].
// copy-to-region: forward identity; backward all-reduce of the gradient, in place.
void copy_to_tp_region_backward(const TensorParallel& tp, float* grad, int64_t n);
// reduce-from-region: forward all-reduce, in place; backward identity.
void reduce_from_tp_region_forward(const TensorParallel& tp, float* x, int64_t n);
// gather-from-sequence-region: forward all-gather of the shards into full; backward
// reduce-scatter of dfull into this rank's shard.
void gather_from_sequence_region_forward(const TensorParallel& tp, const float* shard, float* full,
                                         int64_t shard_numel);
void gather_from_sequence_region_backward(const TensorParallel& tp, const float* dfull, float* dshard,
                                          int64_t shard_numel);
// reduce-scatter-to-sequence-region: the reverse pair.
void reduce_scatter_to_sequence_region_forward(const TensorParallel& tp, const float* full, float* shard,
                                               int64_t shard_numel);
void reduce_scatter_to_sequence_region_backward(const TensorParallel& tp, const float* dshard, float* dfull,
                                                int64_t shard_numel);

// Sum over the tp ranks, in place (the vocab-parallel loss's small reductions).
void tp_all_reduce(const TensorParallel& tp, float* x, int64_t n, ReduceOp op);

}  // namespace ndt
