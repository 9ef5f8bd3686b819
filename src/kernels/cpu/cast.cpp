#include "kernels/cpu/cast.h"

#include "core/error.h"

#include <bit>

namespace ndt::cpu {
namespace {

// Elements below which a cast stays on the calling thread (no fork/join cost).
constexpr int64_t kParallelMin = int64_t{1} << 16;

// Each function is one element, without branches, so the loops below vectorise.

inline uint16_t encode_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;  // RNE, may carry into inf
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;                   // keep sign and payload
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

inline float decode_bf16(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

inline uint16_t encode_f16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  // Normal in f16 (|x| >= 2^-14): re-bias the exponent (127 - 15 = 112) and drop 13
  // mantissa bits with RNE; a carry bumps the exponent, anything past the largest finite
  // value (0x7BFF) becomes inf (0x7C00). Wraps harmlessly for smaller a (not selected).
  const uint32_t t = a - (112u << 23);
  uint32_t normal = (t + 0x0FFFu + ((t >> 13) & 1u)) >> 13;
  normal = normal < 0x7C00u ? normal : 0x7C00u;
  // Subnormal in f16: (mantissa with its implicit bit) >> (126 - exponent), RNE. Shifts of
  // 25 or more give 0 (the value is below half the smallest subnormal), so clamp at 25,
  // which keeps the shift defined and still yields 0 for m < 2^24.
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const int e = static_cast<int>(a >> 23);
  const int s = 126 - e < 25 ? 126 - e : 25;  // >= 14 wherever selected
  const uint32_t subnormal = (m + (1u << (s - 1)) - 1u + ((m >> s) & 1u)) >> s;
  const uint32_t nan = 0x7E00u | ((a >> 13) & 0x3FFu);  // quiet, top payload bits kept
  const uint32_t code = a > 0x7F800000u ? nan : (a >= 0x38800000u ? normal : subnormal);
  return static_cast<uint16_t>(sign | code);
}

inline float decode_f16(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1Fu;
  const uint32_t mant = bits & 0x3FFu;
  const uint32_t normal = ((exp + 112u) << 23) | (mant << 13);
  const uint32_t special = mant == 0 ? 0x7F800000u : (0x7FC00000u | (mant << 13));
  // Subnormal or zero: mant * 2^-24, exact in f32 whatever the rounding mode.
  const uint32_t subnormal = std::bit_cast<uint32_t>(static_cast<float>(mant) * 0x1p-24f);
  // Selects through masks: GCC does not if-convert nested conditionals here.
  const uint32_t is_special = 0u - static_cast<uint32_t>(exp == 0x1Fu);
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(exp == 0);
  const uint32_t finite = (subnormal & is_subnormal) | (normal & ~is_subnormal);
  return std::bit_cast<float>(sign | (special & is_special) | (finite & ~is_special));
}

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
