#include "core/dtype.h"

#include "core/error.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace ndt {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::e4m3: return 1;
    case DType::e5m2: return 1;
    case DType::i32: return 4;
    case DType::u16: return 2;
  }
  fail("invalid dtype value {}", static_cast<int>(dtype));
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
    case DType::i32: return "i32";
    case DType::u16: return "u16";
  }
  return "?";
}

DType dtype_from_name(std::string_view name) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::e4m3, DType::e5m2, DType::i32,
                  DType::u16}) {
    if (dtype_name(d) == name) return d;
  }
  NDT_CHECK(false, "unknown dtype '{}' (valid: f32, bf16, f16, e4m3, e5m2, i32, u16)", name);
  return DType::f32;  // unreachable
}

// ---------------------------------------------------------------------------------------------
// bf16: the top half of an f32.

uint16_t f32_to_bf16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: keep sign and payload, set quiet bit
  }
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest, ties to even (may carry into inf)
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// ---------------------------------------------------------------------------------------------
// Narrow IEEE-like formats (f16, e4m3, e5m2): 1 sign bit, E exponent bits, M mantissa bits.
// Encoding works on the f32 bit pattern with integer arithmetic only, so it does not depend
// on the floating-point environment.

namespace {

struct SmallFormat {
  int mant_bits;        // M
  int bias;             // exponent bias
  int total_bits;       // 1 + E + M
  uint32_t max_code;    // largest finite magnitude code
  uint32_t over_code;   // what a magnitude beyond max_code becomes (inf, or max_code to saturate)
  uint32_t nan_code;    // canonical quiet NaN magnitude code
  bool ieee_special;    // all-ones exponent is inf (mantissa 0) / NaN (else); false for e4m3
};

// f16: max 65504 (0x7BFF), overflow to inf (0x7C00), NaN 0x7E00.
constexpr SmallFormat kF16{10, 15, 16, 0x7BFF, 0x7C00, 0x7E00, true};
// OCP E4M3: no inf, S.1111.111 is NaN, max S.1111.110 = 448; saturating.
constexpr SmallFormat kE4M3{3, 7, 8, 0x7E, 0x7E, 0x7F, false};
// OCP E5M2: inf S.11111.00, NaN S.11111.{01,10,11}, max S.11110.11 = 57344; saturating.
constexpr SmallFormat kE5M2{2, 15, 8, 0x7B, 0x7B, 0x7E, true};

// v >> s rounded to nearest, ties to even (1 <= s <= 31).
inline uint32_t shift_rne(uint32_t v, int s) {
  uint32_t q = v >> s;
  uint32_t rem = v & ((1u << s) - 1u);
  uint32_t half = 1u << (s - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return q;
}

inline uint32_t encode_small(float x, const SmallFormat& f) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  uint32_t sign = (u >> 31) << (f.total_bits - 1);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) {
    uint32_t code = f.nan_code;
    if (f.total_bits == 16) code |= (a >> 13) & 0x3FFu;  // f16 keeps the top payload bits
    return sign | code;
  }
  // f32 bit pattern of the smallest normal of the target format, 2^(1 - bias).
  const uint32_t min_normal = static_cast<uint32_t>(127 - f.bias + 1) << 23;
  uint32_t code;
  if (a >= min_normal) {
    // Re-bias the exponent in place, then drop the extra mantissa bits with RNE; a carry out
    // of the mantissa correctly bumps the exponent. Inputs near or beyond max end above max_code.
    code = shift_rne(a - (static_cast<uint32_t>(127 - f.bias) << 23), 23 - f.mant_bits);
    if (code > f.max_code) code = f.over_code;
  } else {
    // Subnormal in the target: count units of 2^(1 - bias - M), rounded to nearest even.
    int e = static_cast<int>(a >> 23);
    uint32_t m = a & 0x7FFFFFu;
    if (e == 0) {
      e = 1;  // f32 subnormal: no implicit bit
    } else {
      m |= 0x800000u;
    }
    // value = m * 2^(e - 150); code = value / 2^(1 - bias - M) = m * 2^(e - 151 + bias + M).
    int s = 151 - f.bias - f.mant_bits - e;  // >= 24 - M >= 1 here
    code = s >= 25 ? 0u : shift_rne(m, s);   // m < 2^24: s >= 25 is below half the smallest step
  }
  return sign | code;
}

inline float decode_small(uint32_t bits, const SmallFormat& f) {
  const int exp_bits = f.total_bits - 1 - f.mant_bits;
  const uint32_t exp_all = (1u << exp_bits) - 1u;
  uint32_t sign = (bits >> (f.total_bits - 1)) & 1u;
  uint32_t exp = (bits >> f.mant_bits) & exp_all;
  uint32_t mant = bits & ((1u << f.mant_bits) - 1u);
  uint32_t out;
  if (exp == exp_all && f.ieee_special) {
    out = mant == 0 ? 0x7F800000u : (0x7FC00000u | (mant << (23 - f.mant_bits)));
  } else if (exp == exp_all && !f.ieee_special && mant == (1u << f.mant_bits) - 1u) {
    out = 0x7FC00000u;  // e4m3 NaN
  } else if (exp == 0) {
    // Subnormal (or zero): mant * 2^(1 - bias - M), exact in f32.
    float v = static_cast<float>(mant);
    int e2 = 1 - f.bias - f.mant_bits;
    // Multiply by an exact power of two built from bits (e2 is well inside the normal range).
    v *= std::bit_cast<float>(static_cast<uint32_t>(e2 + 127) << 23);
    out = std::bit_cast<uint32_t>(v);
  } else {
    out = ((exp - f.bias + 127) << 23) | (mant << (23 - f.mant_bits));
  }
  return std::bit_cast<float>(out | (sign << 31));
}

}  // namespace

uint16_t f32_to_f16(float x) { return static_cast<uint16_t>(encode_small(x, kF16)); }
float f16_to_f32(uint16_t bits) { return decode_small(bits, kF16); }
uint8_t f32_to_e4m3(float x) { return static_cast<uint8_t>(encode_small(x, kE4M3)); }
float e4m3_to_f32(uint8_t bits) { return decode_small(bits, kE4M3); }
uint8_t f32_to_e5m2(float x) { return static_cast<uint8_t>(encode_small(x, kE5M2)); }
float e5m2_to_f32(uint8_t bits) { return decode_small(bits, kE5M2); }

// ---------------------------------------------------------------------------------------------
// Bulk conversion through f32, in chunks so the intermediate stays in cache.

namespace {

bool is_float_type(DType d) {
  return d == DType::f32 || d == DType::bf16 || d == DType::f16 || d == DType::e4m3 ||
         d == DType::e5m2;
}

void decode_chunk(const void* src, DType dt, size_t first, size_t n, float* out) {
  switch (dt) {
    case DType::f32:
      std::memcpy(out, static_cast<const float*>(src) + first, n * sizeof(float));
      return;
    case DType::bf16: {
      const uint16_t* s = static_cast<const uint16_t*>(src) + first;
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::f16: {
      const uint16_t* s = static_cast<const uint16_t*>(src) + first;
      for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::e4m3: {
      const uint8_t* s = static_cast<const uint8_t*>(src) + first;
      for (size_t i = 0; i < n; ++i) out[i] = e4m3_to_f32(s[i]);
      return;
    }
    case DType::e5m2: {
      const uint8_t* s = static_cast<const uint8_t*>(src) + first;
      for (size_t i = 0; i < n; ++i) out[i] = e5m2_to_f32(s[i]);
      return;
    }
    default: break;
  }
}

void encode_chunk(const float* in, size_t n, void* dst, DType dt, size_t first) {
  switch (dt) {
    case DType::f32:
      std::memcpy(static_cast<float*>(dst) + first, in, n * sizeof(float));
      return;
    case DType::bf16: {
      uint16_t* d = static_cast<uint16_t*>(dst) + first;
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(in[i]);
      return;
    }
    case DType::f16: {
      uint16_t* d = static_cast<uint16_t*>(dst) + first;
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(in[i]);
      return;
    }
    case DType::e4m3: {
      uint8_t* d = static_cast<uint8_t*>(dst) + first;
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_e4m3(in[i]);
      return;
    }
    case DType::e5m2: {
      uint8_t* d = static_cast<uint8_t*>(dst) + first;
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_e5m2(in[i]);
      return;
    }
    default: break;
  }
}

}  // namespace

void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n) {
  NDT_CHECK(is_float_type(src_dtype) && is_float_type(dst_dtype),
            "convert supports only floating types (f32, bf16, f16, e4m3, e5m2), got {} -> {}",
            dtype_name(src_dtype), dtype_name(dst_dtype));
  if (n == 0) return;
  if (src_dtype == dst_dtype) {
    std::memmove(dst, src, n * dtype_size(src_dtype));
    return;
  }
  if (src_dtype == DType::f32) {
    encode_chunk(static_cast<const float*>(src), n, dst, dst_dtype, 0);
    return;
  }
  if (dst_dtype == DType::f32) {
    decode_chunk(src, src_dtype, 0, n, static_cast<float*>(dst));
    return;
  }
  constexpr size_t kChunk = 1024;
  float buf[kChunk];
  for (size_t first = 0; first < n; first += kChunk) {
    size_t len = std::min(kChunk, n - first);
    decode_chunk(src, src_dtype, first, len, buf);
    encode_chunk(buf, len, dst, dst_dtype, first);
  }
}

}  // namespace ndt
