// The model's side of tensor parallelism: the interface a unit calls where a
// tensor-parallel region begins and ends, owned here so that the model includes
// nothing from parallel/ or comm/. The base class is tensor parallelism of size 1:
// every operator is the identity, and the model runs as on one rank.
// parallelize() (parallel/parallelize.h) installs the Megatron implementation
// (parallel/tensor/tensor_parallel.h), whose collectives run over the tp mesh axis.
//
// A region is the stretch between a column-parallel layer's input and a row-parallel
// layer's output, where each tp rank holds a slice of the features (heads, MLP
// hidden units). Without sequence parallel the activations outside regions are
// replicated (all rows on every rank); with it they are split by rows (tokens), and
// a rank holds local_rows = rows / tp of them.
#pragma once

#include "model/activation_layout.h"

#include <cstdint>

namespace ndt {

enum class Reduction { sum, max };

class TensorParallelRegions {
 public:
  virtual ~TensorParallelRegions() = default;

  // Tensor parallelism's part of the layout (cp stays 1: the model adds it).
  virtual ActivationLayout layout() const { return {}; }
  virtual int rank() const { return 0; }
  int size() const { return layout().tp; }
  bool active() const { return size() > 1; }
  bool splits_rows() const { return layout().splits_rows(); }
  int64_t local_rows(int64_t rows) const { return layout().local_rows(rows); }

  // Column-parallel input, forward: x [local_rows, C] -> the region's input for all
  // rows: x itself (copy-to-region), or all-gathered into full (gather-from-sequence-
  // region). Returns where it is.
  virtual const float* column_input_forward(const float* x, float* full, int64_t local_rows, int64_t C) const {
    return x;
  }
  // Backward: dfull [rows, C] holds this rank's part of the input gradient; the sum over
  // ranks lands in place (all-reduce) or in dx [local_rows, C] (reduce-scatter). Returns where.
  virtual float* column_input_backward(float* dfull, float* dx, int64_t local_rows, int64_t C) const {
    return dfull;
  }
  // Row-parallel output, forward: partial [rows, C] (this rank's part of the product) ->
  // the sum over ranks, in place (reduce-from-region) or in y [local_rows, C]
  // (reduce-scatter-to-sequence-region). Returns where.
  virtual float* row_output_forward(float* partial, float* y, int64_t local_rows, int64_t C) const {
    return partial;
  }
  // Backward: dy [local_rows, C] -> the output gradient for all rows: dy itself, or
  // all-gathered into dfull. Returns where.
  virtual const float* row_output_backward(const float* dy, float* dfull, int64_t local_rows, int64_t C) const {
    return dy;
  }
  // x[0..n) reduced over the tp ranks, in place (the vocab-parallel loss's row
  // statistics, partial parameter gradients).
  virtual void all_reduce(float* x, int64_t n, Reduction op) const {}
  // out [size x n] = every rank's in [n], in rank order (a vocab-parallel logits row).
  virtual void all_gather(const float* in, float* out, int64_t n) const;
};

}  // namespace ndt
