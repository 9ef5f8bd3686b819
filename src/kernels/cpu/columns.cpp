#include "kernels/cpu/columns.h"

#include "core/error.h"
#include "kernels/cpu/lowp_bits.h"

namespace ndt::cpu {
namespace {

using namespace lowp_bits;

// Elements below which a pass stays on the calling thread (no fork/join cost).
constexpr int64_t kParallelMin = int64_t{1} << 16;

int64_t total_width(const ColumnBlock* blocks, int count) {
  int64_t total = 0;
  for (int i = 0; i < count; ++i) total += blocks[i].width;
  return total;
}

// x rounded to dtype and read back (f32: x itself).
inline float round_value(DType dtype, float x) {
  if (dtype == DType::bf16) return decode_bf16(encode_bf16(x));
  if (dtype == DType::f16) return decode_f16(encode_f16(x));
  return x;
}

// Calls f(row, block, offset of the block in the row) for every row and block, rows split
// over the threads when the matrix is large.
template <class F>
void for_each_row_block(const ColumnBlock* blocks, int count, int64_t rows, F f) {
  const int64_t total = total_width(blocks, count);
#pragma omp parallel for schedule(static) if (rows * total >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t offset = 0;
    for (int i = 0; i < count; ++i) {
      f(r, blocks[i], r * total + offset);
      offset += blocks[i].width;
    }
  }
}

}  // namespace

void split_columns_round(DType dtype, const float* src, const ColumnBlock* blocks, int count, int64_t rows) {
  NDT_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
            "split_columns_round: dtype must be f32, bf16 or f16, got {}", dtype_name(dtype));
  for_each_row_block(blocks, count, rows, [&](int64_t r, const ColumnBlock& b, int64_t at) {
    const float* in = src + at;
    float* out = b.data + r * b.width;
    if (b.bias) {
#pragma omp simd
      for (int64_t j = 0; j < b.width; ++j) out[j] = round_value(dtype, in[j] + b.bias[j]);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < b.width; ++j) out[j] = round_value(dtype, in[j]);
    }
  });
}

void gather_columns_lowp(DType dtype, const ColumnBlock* blocks, int count, int64_t rows, uint16_t* dst) {
  NDT_CHECK(dtype == DType::bf16 || dtype == DType::f16, "gather_columns_lowp: dtype must be bf16 or f16, got {}",
            dtype_name(dtype));
  const bool bf16 = dtype == DType::bf16;
  for_each_row_block(blocks, count, rows, [&](int64_t r, const ColumnBlock& b, int64_t at) {
    const float* in = b.data + r * b.width;
    uint16_t* out = dst + at;
#pragma omp simd
    for (int64_t j = 0; j < b.width; ++j) out[j] = bf16 ? encode_bf16(in[j]) : encode_f16(in[j]);
  });
}

void gather_columns(const ColumnBlock* blocks, int count, int64_t rows, float* dst) {
  for_each_row_block(blocks, count, rows, [&](int64_t r, const ColumnBlock& b, int64_t at) {
    const float* in = b.data + r * b.width;
    float* out = dst + at;
    for (int64_t j = 0; j < b.width; ++j) out[j] = in[j];
  });
}

}  // namespace ndt::cpu
