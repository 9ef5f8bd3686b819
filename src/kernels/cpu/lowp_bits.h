// One element's conversion between fp32 and bf16 / f16 bits, round to nearest even, as
// branch-free integer code the compiler vectorises (no dependence on FTZ/DAZ or the
// rounding mode): the inner step of the bulk casts (cast.h) and of the kernels that
// round a value where they make it (columns.h). Internal to kernels/cpu.
#pragma once

#include "core/dtype.h"

#include <bit>
#include <cstdint>

namespace ndt::cpu::lowp_bits {

// Each function is one element, without branches, so the loops calling them vectorise.

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

// A row converted on the calling thread: for the short rows of kernels that run inside a
// parallel region or call per row, where the bulk casts' parallel-if region (a team made
// and freed per call, even of one thread) costs more than the conversion.
inline void encode_row(DType dtype, const float* src, uint16_t* dst, int64_t n) {
  if (dtype == DType::bf16) {
#pragma omp simd
    for (int64_t e = 0; e < n; ++e) dst[e] = encode_bf16(src[e]);
  } else {
#pragma omp simd
    for (int64_t e = 0; e < n; ++e) dst[e] = encode_f16(src[e]);
  }
}

inline void decode_row(DType dtype, const uint16_t* src, float* dst, int64_t n) {
  if (dtype == DType::bf16) {
#pragma omp simd
    for (int64_t e = 0; e < n; ++e) dst[e] = decode_bf16(src[e]);
  } else {
#pragma omp simd
    for (int64_t e = 0; e < n; ++e) dst[e] = decode_f16(src[e]);
  }
}

}  // namespace ndt::cpu::lowp_bits
