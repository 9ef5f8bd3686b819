// Gradient reduction in a 16-bit dtype (precision.reduce_dtype = "bf16"; docs/precision.md):
// what travels is the fp32 gradients rounded to the dtype, half the bytes of fp32, and
// each partial sum the collective forms is rounded again (MPI's bf16 sum widens both
// operands to fp32, adds, rounds). The reduced result is widened back into the fp32
// gradients; accumulation across micro-steps and the optimizer stay fp32.
#pragma once

#include "core/tensor.h"

#include <cstdint>

namespace ndt {

// x [n] rounded to dtype (bf16 or f16) in a new buffer (ledger tag comm).
Tensor round_for_reduction(DType dtype, const float* x, int64_t n);
// The staged values widened to fp32: written to out, or added to it (accumulate).
void widen_reduced(const Tensor& staged, float* out, bool accumulate);

}  // namespace ndt
