// The Megatron communication operators of tensor parallelism, kept apart from the
// layers that use them. A tensor-parallel region is the stretch between a column-
// parallel layer's input and a row-parallel layer's output, where each tp rank holds
// a slice of the features (heads, MLP hidden units).
//
// Splits: nothing itself; it moves activations [rows, C] in and out of regions.
// Communicates, over the tp axis, per region:
//   without sequence parallel (activations outside regions replicated, all rows):
//     entry  = copy-to-region           forward identity,    backward all-reduce
//     exit   = reduce-from-region       forward all-reduce,  backward identity
//   with sequence parallel (activations outside regions split by rows, rows / tp each):
//     entry  = gather-from-sequence-region      forward all-gather,     backward reduce-scatter
//     exit   = reduce-scatter-to-sequence-region forward reduce-scatter, backward all-gather
// Both variants move the same volume: an all-gather plus a reduce-scatter is one
// all-reduce. The rows split under sequence parallel are the flattened B x T tokens,
// contiguous blocks in rank order (the layout in which an all-gather of row blocks
// is the whole tensor, as Megatron's [s, b, h] order is for it).
#pragma once

#include "comm/communicator.h"

#include <cstdint>

namespace ndt {

// The shape of tensor parallelism, without the group: enough to size buffers and
// predict memory.
struct TpLayout {
  int size = 1;
  bool sequence_parallel = false;
  bool splits_rows() const { return size > 1 && sequence_parallel; }
  // Rows a rank holds outside the regions, of `rows` in all.
  int64_t local_rows(int64_t rows) const { return splits_rows() ? rows / size : rows; }
};

// The tensor-parallel group a model runs on. comm == nullptr means tp = 1 (every
// operator is then the identity).
struct TensorParallel {
  Communicator* comm = nullptr;
  bool sequence_parallel = false;

  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }
  bool active() const { return size() > 1; }
  TpLayout layout() const { return {size(), sequence_parallel}; }
  bool splits_rows() const { return layout().splits_rows(); }
  int64_t local_rows(int64_t rows) const { return layout().local_rows(rows); }
};

// Region entry, forward: x [local_rows, C] -> the region's input [rows, C]. Returns x
// itself without sequence parallel; otherwise all-gathers x into full.
const float* region_entry_forward(const TensorParallel& tp, const float* x, float* full, int64_t local_rows, int64_t C);
// Region entry, backward: dfull [rows, C] holds this rank's part of the input gradient;
// the sum over ranks is reduced in place (all-reduce) or scattered into dx [local_rows, C]
// (reduce-scatter). Returns where the result is.
float* region_entry_backward(const TensorParallel& tp, float* dfull, float* dx, int64_t local_rows, int64_t C);
// Region exit, forward: partial [rows, C] (this rank's part of a row-parallel product)
// -> the sum over ranks, in place (all-reduce) or scattered into y [local_rows, C]
// (reduce-scatter). Returns where the result is.
float* region_exit_forward(const TensorParallel& tp, float* partial, float* y, int64_t local_rows, int64_t C);
// Region exit, backward: dy [local_rows, C] -> the output gradient for all rows:
// dy itself without sequence parallel, else all-gathered into dfull.
const float* region_exit_backward(const TensorParallel& tp, const float* dy, float* dfull, int64_t local_rows,
                                  int64_t C);

// Sum over the tp ranks, in place (the vocab-parallel loss's small reductions).
void tp_all_reduce(const TensorParallel& tp, float* x, int64_t n, ReduceOp op);

}  // namespace ndt
