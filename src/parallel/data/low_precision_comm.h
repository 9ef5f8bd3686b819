// fp32 values sent in a 16-bit dtype, half the bytes (docs/precision.md): data-parallel
// gradient reductions with precision.reduce_dtype = "bf16" (each partial sum the
// collective forms is rounded again: MPI's bf16 sum widens both operands to fp32, adds,
// rounds; accumulation across micro-steps and the optimizer stay fp32), and FSDP's
// all-gathers of matmul-only weights in the compute dtype. What is received is widened
// back to fp32.
#pragma once

#include "core/tensor.h"

#include <cstdint>

namespace ndt {

// x [n] rounded to dtype (bf16 or f16) in a new buffer to send (ledger tag comm).
Tensor round_for_sending(DType dtype, const float* x, int64_t n);
// The received 16-bit values widened to fp32: written to out, or added to it (accumulate).
void widen_received(const Tensor& received, float* out, bool accumulate);

}  // namespace ndt
