#include "kernels/cpu/cast.h"

#include "core/error.h"
#include "kernels/cpu/lowp_bits.h"

namespace ndt::cpu {
namespace {

using namespace lowp_bits;

// Elements below which a cast stays on the calling thread (no fork/join cost).
constexpr int64_t kParallelMin = int64_t{1} << 16;

void check_lowp(DType dtype, const char* what) {
  NDT_CHECK(dtype == DType::bf16 || dtype == DType::f16,
            "{}: dtype must be bf16 or f16, got {}", what, dtype_name(dtype));
}

}  // namespace

void cast_to_lowp(DType dtype, const float* src, uint16_t* dst, int64_t n) {
  check_lowp(dtype, "cast_to_lowp");
  if (dtype == DType::bf16) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) dst[i] = encode_bf16(src[i]);
  } else {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) dst[i] = encode_f16(src[i]);
  }
}

void cast_rows_to_lowp(DType dtype, const float* src, int64_t rows, int64_t cols, uint16_t* dst, int64_t ld) {
  check_lowp(dtype, "cast_rows_to_lowp");
  NDT_CHECK(rows >= 0 && cols >= 0 && ld >= cols, "cast_rows_to_lowp: {} rows of {} columns into rows {} apart", rows,
            cols, ld);
  const bool bf16 = dtype == DType::bf16;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = src + r * cols;
    uint16_t* out = dst + r * ld;
    if (bf16) {
#pragma omp simd
      for (int64_t i = 0; i < cols; ++i) out[i] = encode_bf16(in[i]);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < cols; ++i) out[i] = encode_f16(in[i]);
    }
    for (int64_t i = cols; i < ld; ++i) out[i] = 0;
  }
}

void cast_from_lowp(DType dtype, const uint16_t* src, float* dst, int64_t n) {
  check_lowp(dtype, "cast_from_lowp");
  if (dtype == DType::bf16) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) dst[i] = decode_bf16(src[i]);
  } else {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) dst[i] = decode_f16(src[i]);
  }
}

void round_to_lowp(DType dtype, float* x, int64_t n) {
  check_lowp(dtype, "round_to_lowp");
  if (dtype == DType::bf16) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) x[i] = decode_bf16(encode_bf16(x[i]));
  } else {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) x[i] = decode_f16(encode_f16(x[i]));
  }
}

}  // namespace ndt::cpu
