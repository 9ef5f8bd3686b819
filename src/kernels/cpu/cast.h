// Bulk conversions between fp32 and the 16-bit float formats (bf16, f16) for the
// low-precision GEMMs and mixed-precision training: the same bits as the scalar
// f32_to_bf16 / f32_to_f16 / bf16_to_f32 / f16_to_f32 of core/dtype.h (round to nearest
// even, NaN stays NaN, f16 overflows to inf), written as branch-free integer loops the
// compiler vectorises, so they do not depend on the floating-point environment (FTZ/DAZ,
// rounding mode). Large arrays are split across the OpenMP threads.
#pragma once

#include "core/dtype.h"

#include <cstdint>

namespace ndt::cpu {

// dst[i] = dtype(src[i]) as raw bits; dtype is bf16 or f16 (else ndt::Error).
void cast_to_lowp(DType dtype, const float* src, uint16_t* dst, int64_t n);
// The same for a [rows, cols] matrix into rows `ld` elements apart (ld >= cols), the
// columns from cols to ld of each row set to 0: a GEMM operand whose rows start 64 bytes
// apart (model/matmul.h, lowp_row_stride): oneDNN's bf16 kernel multiplied rows of GPT-2's
// vocabulary, 50257 elements apart, 1.4-1.6x slower.
void cast_rows_to_lowp(DType dtype, const float* src, int64_t rows, int64_t cols, uint16_t* dst, int64_t ld);
// dst[i] = float(src[i]), src holding dtype's bits (bf16 or f16); exact.
void cast_from_lowp(DType dtype, const uint16_t* src, float* dst, int64_t n);
// x[i] = float(dtype(x[i])) in place: what storing in dtype and reading back gives.
void round_to_lowp(DType dtype, float* x, int64_t n);

}  // namespace ndt::cpu
