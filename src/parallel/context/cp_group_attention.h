// What ring attention, Ulysses and USP share: the cp group whose ranks split each
// sequence, the layout of their rows (CpLayout), and the sum over those ranks of
// per-sequence statistics (the MoE router's). Splits nothing itself; communicates only
// that sum, one all-reduce over cp.
#pragma once

#include "comm/communicator.h"
#include "model/context_parallel_attention.h"

#include <cstdint>

namespace ndt {

class CpGroupAttention : public ContextParallelAttention {
 public:
  CpGroupAttention(Communicator& cp, const CpLayout& layout) : cp_(cp), layout_(layout) {}
  CpLayout layout() const override { return layout_; }
  int rank() const override { return cp_.rank(); }
  void sum_over_ranks(float* x, int64_t n) const override {
    cp_.all_reduce(x, static_cast<size_t>(n), DType::f32, ReduceOp::sum);
  }

 protected:
  Communicator& cp_;
  CpLayout layout_;
};

}  // namespace ndt
