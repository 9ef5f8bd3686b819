// Element types and their conversions. Low-precision formats are stored as raw bits
// (uint16_t / uint8_t) and converted with round-to-nearest-even; fp8 conversions
// saturate to the largest finite value instead of overflowing to infinity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ndt {

enum class DType : uint8_t { f32, bf16, f16, e4m3, e5m2, i32, u16 };

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);       // "f32", "bf16", "f16", "e4m3", "e5m2", "i32", "u16"
DType dtype_from_name(std::string_view name);   // throws ndt::Error naming the unknown value

uint16_t f32_to_bf16(float x);   // round to nearest even; NaN stays NaN
float bf16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float x);    // IEEE half, round to nearest even, subnormals, overflow to inf
float f16_to_f32(uint16_t bits);
// FP8 encoders: values beyond the max finite value, and +-inf, become +-max; NaN stays
// NaN (e4m3 S.1111.111, e5m2 S.11111.10); f32 values below half the smallest subnormal
// become signed zero.
uint8_t f32_to_e4m3(float x);    // OCP FP8 E4M3 (bias 7, max 448, no inf), saturating, RNE
float e4m3_to_f32(uint8_t bits);
uint8_t f32_to_e5m2(float x);    // OCP FP8 E5M2 (bias 15, max 57344), saturating, RNE
float e5m2_to_f32(uint8_t bits);

// Converts n elements between any two floating types (f32, bf16, f16, e4m3, e5m2) by
// way of f32 (same type: a plain copy). src and dst must not overlap unless equal types.
// Throws ndt::Error for the integer types.
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n);

}  // namespace ndt
