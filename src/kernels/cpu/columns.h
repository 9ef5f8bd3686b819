// Several matrices of the same rows side by side as the column blocks of one matrix: the
// fused projections' operands (model/fused_projections.h), where q, k and v (or gate and
// up) are one GEMM. The output is split into its layers' buffers, biased and rounded to
// the compute dtype in one pass; the output gradients are gathered into one GEMM operand,
// rounded as they are gathered. Rounding is cast.h's (round to nearest even, the same bits).
#pragma once

#include "core/dtype.h"

#include <cstdint>

namespace ndt::cpu {

// Block i of a [rows, sum of widths] matrix: the columns after those of blocks 0..i-1.
struct ColumnBlock {
  float* data = nullptr;        // [rows, width], row-major
  const float* bias = nullptr;  // [width], or null (split_columns_round only)
  int64_t width = 0;
};

// Each block's data[r, j] = round(src[r, offset + j] + bias[j]) (no add without a bias),
// src [rows, sum of widths]; round to dtype as round_to_lowp (bf16 or f16), or none for f32.
void split_columns_round(DType dtype, const float* src, const ColumnBlock* blocks, int count, int64_t rows);
// dst [rows, sum of widths] = the blocks' data side by side, as dtype bits (bf16 or f16)
// rounded as cast_to_lowp.
void gather_columns_lowp(DType dtype, const ColumnBlock* blocks, int count, int64_t rows, uint16_t* dst);
// The same in fp32, exactly: dst = the blocks side by side.
void gather_columns(const ColumnBlock* blocks, int count, int64_t rows, float* dst);

}  // namespace ndt::cpu
