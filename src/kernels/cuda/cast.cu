// fp32 <-> bf16/f16 (kernels/cpu/cast.h) with CUDA's round-to-nearest-even conversions
// (__float2bfloat16_rn, __float2half_rn: f16 overflow gives inf, NaN stays NaN), so the
// bits equal the CPU's for every finite input.
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace ndt::cuda {
namespace {

template <bool kBf16>
__device__ inline uint16_t to_bits(float x) {
  if constexpr (kBf16) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  } else {
    return __half_as_ushort(__float2half_rn(x));
  }
}

template <bool kBf16>
__device__ inline float from_bits(uint16_t bits) {
  if constexpr (kBf16) {
    return __bfloat162float(__ushort_as_bfloat16(bits));
  } else {
    return __half2float(__ushort_as_half(bits));
  }
}

template <bool kBf16>
__global__ void to_lowp_kernel(const float* src, uint16_t* dst, int64_t n) {
  NDT_GRID_LOOP(i, n) dst[i] = to_bits<kBf16>(src[i]);
}

// Element i of the [rows, ld] destination: a cast source element, or 0 past the columns.
template <bool kBf16>
__global__ void rows_to_lowp_kernel(const float* src, int64_t cols, uint16_t* dst, int64_t ld, int64_t n) {
  NDT_GRID_LOOP(i, n) {
    const int64_t r = i / ld, c = i % ld;
    dst[i] = c < cols ? to_bits<kBf16>(src[r * cols + c]) : uint16_t{0};
  }
}

template <bool kBf16>
__global__ void from_lowp_kernel(const uint16_t* src, float* dst, int64_t n) {
  NDT_GRID_LOOP(i, n) dst[i] = from_bits<kBf16>(src[i]);
}

template <bool kBf16>
__global__ void round_kernel(float* x, int64_t n) {
  NDT_GRID_LOOP(i, n) x[i] = from_bits<kBf16>(to_bits<kBf16>(x[i]));
}

bool is_bf16(DType dtype, const char* kernel) {
  if (dtype != DType::bf16 && dtype != DType::f16) {
    refuse(std::string(kernel) + ": dtype " + std::string(dtype_name(dtype)) + " is not bf16 or f16");
  }
  return dtype == DType::bf16;
}

}  // namespace

void cast_to_lowp(DType dtype, const float* src, uint16_t* dst, int64_t n) {
  const bool bf16 = is_bf16(dtype, "cast_to_lowp");
  if (n <= 0) return;
  if (bf16) {
    to_lowp_kernel<true><<<blocks_for(n), kThreads>>>(src, dst, n);
  } else {
    to_lowp_kernel<false><<<blocks_for(n), kThreads>>>(src, dst, n);
  }
  check_launch("cast_to_lowp");
}

void cast_rows_to_lowp(DType dtype, const float* src, int64_t rows, int64_t cols, uint16_t* dst, int64_t ld) {
  const bool bf16 = is_bf16(dtype, "cast_rows_to_lowp");
  if (rows < 0 || cols < 0 || ld < cols) {
    refuse("cast_rows_to_lowp: " + std::to_string(rows) + " rows of " + std::to_string(cols) +
           " columns into rows " + std::to_string(ld) + " apart");
  }
  const int64_t n = rows * ld;
  if (n <= 0) return;
  if (bf16) {
    rows_to_lowp_kernel<true><<<blocks_for(n), kThreads>>>(src, cols, dst, ld, n);
  } else {
    rows_to_lowp_kernel<false><<<blocks_for(n), kThreads>>>(src, cols, dst, ld, n);
  }
  check_launch("cast_rows_to_lowp");
}

void cast_from_lowp(DType dtype, const uint16_t* src, float* dst, int64_t n) {
  const bool bf16 = is_bf16(dtype, "cast_from_lowp");
  if (n <= 0) return;
  if (bf16) {
    from_lowp_kernel<true><<<blocks_for(n), kThreads>>>(src, dst, n);
  } else {
    from_lowp_kernel<false><<<blocks_for(n), kThreads>>>(src, dst, n);
  }
  check_launch("cast_from_lowp");
}

void round_to_lowp(DType dtype, float* x, int64_t n) {
  const bool bf16 = is_bf16(dtype, "round_to_lowp");
  if (n <= 0) return;
  if (bf16) {
    round_kernel<true><<<blocks_for(n), kThreads>>>(x, n);
  } else {
    round_kernel<false><<<blocks_for(n), kThreads>>>(x, n);
  }
  check_launch("round_to_lowp");
}

}  // namespace ndt::cuda
