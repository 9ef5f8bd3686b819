#include "core/dtype.h"
#include "core/error.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace ndt {
namespace {

float f32_bits(uint32_t u) { return std::bit_cast<float>(u); }
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- names and sizes ------------------------------------------------------------------------

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::e4m3), 1u);
  EXPECT_EQ(dtype_size(DType::e5m2), 1u);
  EXPECT_EQ(dtype_size(DType::i32), 4u);
  EXPECT_EQ(dtype_size(DType::u16), 2u);
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::e4m3, DType::e5m2, DType::i32,
                  DType::u16}) {
    EXPECT_EQ(dtype_from_name(dtype_name(d)), d) << dtype_name(d);
  }
  EXPECT_EQ(dtype_name(DType::e4m3), "e4m3");
  EXPECT_EQ(dtype_from_name("bf16"), DType::bf16);
}

TEST(DType, UnknownNameThrowsNamingValueAndChoices) {
  try {
    dtype_from_name("fp32");
    FAIL() << "expected ndt::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("fp32"), std::string::npos) << msg;
    EXPECT_NE(msg.find("bf16"), std::string::npos) << msg;
    EXPECT_NE(msg.find("e5m2"), std::string::npos) << msg;
  }
  EXPECT_THROW(dtype_from_name(""), Error);
  EXPECT_THROW(dtype_from_name("F32"), Error);
}

// ---- bf16 -----------------------------------------------------------------------------------

TEST(BF16, KnownValues) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(kInf), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-kInf), 0xFF80);
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0x4049), 3.140625f);
}

TEST(BF16, RoundsToNearestEven) {
  // Exact ties go to the even neighbour.
  EXPECT_EQ(f32_to_bf16(f32_bits(0x3F808000u)), 0x3F80);
  EXPECT_EQ(f32_to_bf16(f32_bits(0x3F818000u)), 0x3F82);
  // Just above / below the tie.
  EXPECT_EQ(f32_to_bf16(f32_bits(0x3F808001u)), 0x3F81);
  EXPECT_EQ(f32_to_bf16(f32_bits(0x3F807FFFu)), 0x3F80);
  // Negative ties behave symmetrically.
  EXPECT_EQ(f32_to_bf16(f32_bits(0xBF808000u)), 0xBF80);
  EXPECT_EQ(f32_to_bf16(f32_bits(0xBF818000u)), 0xBF82);
  // Rounding the largest finite f32 overflows to inf.
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
}

TEST(BF16, NaNStaysQuietNaN) {
  uint16_t b = f32_to_bf16(kNaN);
  EXPECT_TRUE(std::isnan(bf16_to_f32(b)));
  // A signalling NaN whose payload lives only in the low 16 bits must not become inf.
  uint16_t s = f32_to_bf16(f32_bits(0x7F800001u));
  EXPECT_TRUE(std::isnan(bf16_to_f32(s))) << std::hex << s;
  EXPECT_NE(s & 0x0040, 0);  // quiet bit set
  uint16_t n = f32_to_bf16(f32_bits(0xFF800001u));
  EXPECT_TRUE(std::isnan(bf16_to_f32(n)));
  EXPECT_NE(n & 0x8000, 0);  // sign kept
  // The all-ones pattern is NaN and must not carry into the sign bit.
  EXPECT_EQ(f32_to_bf16(f32_bits(0x7FFFFFFFu)), 0x7FFF);
}

// ---- f16 ------------------------------------------------------------------------------------

TEST(F16, KnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(0.1f), 0x2E66);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.0f, -24)), 0x03FF);  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(0x7C00), kInf);
  EXPECT_EQ(f16_to_f32(0xFC00), -kInf);
}

TEST(F16, OverflowGoesToInf) {
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7BFF);  // below the midpoint to 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);   // midpoint ties to "even" = inf
  EXPECT_EQ(f32_to_f16(1e6f), 0x7C00);
  EXPECT_EQ(f32_to_f16(-1e6f), 0xFC00);
  EXPECT_EQ(f32_to_f16(kInf), 0x7C00);
  EXPECT_EQ(f32_to_f16(-kInf), 0xFC00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::max()), 0x7C00);
}

TEST(F16, UnderflowAndSubnormalRounding) {
  // 2^-25 is the midpoint between 0 and the smallest subnormal: ties to even (0).
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(f32_to_f16(-std::ldexp(1.0f, -25)), 0x8000);
  // Just above the midpoint rounds up.
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25) * 1.0001f), 0x0001);
  // 1.5 * 2^-24 ties to 2 (even), 2.5 * 2^-24 ties to 2.
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -24)), 0x0002);
  EXPECT_EQ(f32_to_f16(std::ldexp(2.5f, -24)), 0x0002);
  EXPECT_EQ(f32_to_f16(std::ldexp(3.5f, -24)), 0x0004);
  // Largest subnormal + half a step ties to the even smallest normal.
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.5f, -24)), 0x0400);
  // f32 subnormals flush to signed zero.
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::denorm_min()), 0x8000);
}

TEST(F16, TiesToEvenAtMidpoint) {
  // 1 + 2^-11 is halfway between 1 (0x3C00, even) and 1 + 2^-10 (0x3C01): goes down.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  // 1 + 3 * 2^-11 is halfway between 0x3C01 (odd) and 0x3C02: goes up.
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  // Off the midpoint it rounds to nearest.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
  // Carry from the mantissa into the exponent: 2 - 2^-12 rounds to 2.
  EXPECT_EQ(f32_to_f16(2.0f - std::ldexp(1.0f, -12)), 0x4000);
}

TEST(F16, SignedZeroAndNegatives) {
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_EQ(f16_to_f32(0x8000), 0.0f);
  EXPECT_EQ(f32_to_f16(-65504.0f), 0xFBFF);
  EXPECT_EQ(f32_to_f16(-0.1f), 0xAE66);
  EXPECT_EQ(f32_to_f16(-std::ldexp(1.0f, -24)), 0x8001);
}

TEST(F16, NaN) {
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(kNaN))));
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f32_bits(0x7F800001u)))));  // low-payload sNaN
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f32_bits(0xFFC00000u)))));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7C01)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0xFE00)));
}

// ---- fp8 ------------------------------------------------------------------------------------

TEST(E4M3, KnownValues) {
  EXPECT_EQ(f32_to_e4m3(1.0f), 0x38);
  EXPECT_EQ(f32_to_e4m3(-1.0f), 0xB8);
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-448.0f), 0xFE);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -9)), 0x01);   // smallest subnormal
  EXPECT_EQ(f32_to_e4m3(std::ldexp(7.0f, -9)), 0x07);   // largest subnormal
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -6)), 0x08);   // smallest normal
  EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_f32(0x78), 256.0f);  // exponent all ones is still finite in E4M3
  EXPECT_EQ(e4m3_to_f32(0x3C), 1.5f);
  EXPECT_TRUE(std::signbit(e4m3_to_f32(0x80)));
}

TEST(E4M3, Saturates) {
  EXPECT_EQ(f32_to_e4m3(1e6f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-1e6f), 0xFE);
  EXPECT_EQ(f32_to_e4m3(464.0f), 0x7E);  // midpoint to the (NaN) next code
  EXPECT_EQ(f32_to_e4m3(500.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(kInf), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-kInf), 0xFE);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::max()), 0x7E);
}

TEST(E4M3, NaN) {
  EXPECT_EQ(f32_to_e4m3(kNaN) & 0x7F, 0x7F);
  EXPECT_EQ(f32_to_e4m3(-kNaN), 0xFF);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xFF)));
}

TEST(E4M3, TiesToEven) {
  // Between 1.0 (0x38, even) and 1.125 (0x39): midpoint 1.0625 goes to 1.0.
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);
  // Between 1.125 (0x39, odd) and 1.25 (0x3A): midpoint 1.1875 goes to 1.25.
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3A);
  EXPECT_EQ(f32_to_e4m3(1.07f), 0x39);
  // Subnormal midpoint: 1.5 * 2^-9 ties to 2 * 2^-9; half the smallest ties to zero.
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.5f, -9)), 0x02);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(f32_to_e4m3(-std::ldexp(1.0f, -10)), 0x80);
  // 7.5 * 2^-9 carries into the smallest normal.
  EXPECT_EQ(f32_to_e4m3(std::ldexp(7.5f, -9)), 0x08);
}

TEST(E5M2, KnownValues) {
  EXPECT_EQ(f32_to_e5m2(1.0f), 0x3C);
  EXPECT_EQ(f32_to_e5m2(-1.0f), 0xBC);
  EXPECT_EQ(f32_to_e5m2(57344.0f), 0x7B);
  EXPECT_EQ(f32_to_e5m2(std::ldexp(1.0f, -16)), 0x01);  // smallest subnormal
  EXPECT_EQ(f32_to_e5m2(std::ldexp(1.0f, -14)), 0x04);  // smallest normal
  EXPECT_EQ(f32_to_e5m2(-0.0f), 0x80);
  EXPECT_EQ(e5m2_to_f32(0x7B), 57344.0f);
  EXPECT_EQ(e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(e5m2_to_f32(0x7C), kInf);
  EXPECT_EQ(e5m2_to_f32(0xFC), -kInf);
  EXPECT_TRUE(std::isnan(e5m2_to_f32(0x7D)));
  EXPECT_TRUE(std::isnan(e5m2_to_f32(0xFF)));
}

TEST(E5M2, Saturates) {
  EXPECT_EQ(f32_to_e5m2(1e9f), 0x7B);
  EXPECT_EQ(f32_to_e5m2(-1e9f), 0xFB);
  EXPECT_EQ(f32_to_e5m2(61440.0f), 0x7B);  // midpoint to inf
  EXPECT_EQ(f32_to_e5m2(kInf), 0x7B);
  EXPECT_EQ(f32_to_e5m2(-kInf), 0xFB);
  EXPECT_TRUE(std::isnan(e5m2_to_f32(f32_to_e5m2(kNaN))));
  EXPECT_TRUE(std::isnan(e5m2_to_f32(f32_to_e5m2(f32_bits(0x7F800001u)))));
}

TEST(E5M2, TiesToEven) {
  // Between 1.0 (0x3C, even) and 1.25 (0x3D): midpoint 1.125 goes to 1.0.
  EXPECT_EQ(f32_to_e5m2(1.125f), 0x3C);
  // Between 1.25 (0x3D, odd) and 1.5 (0x3E): midpoint 1.375 goes to 1.5.
  EXPECT_EQ(f32_to_e5m2(1.375f), 0x3E);
  EXPECT_EQ(f32_to_e5m2(1.13f), 0x3D);
  // Between 1.75 (0x3F, odd) and 2.0 (0x40): midpoint carries into the exponent.
  EXPECT_EQ(f32_to_e5m2(1.875f), 0x40);
  EXPECT_EQ(f32_to_e5m2(-1.875f), 0xC0);
  EXPECT_EQ(f32_to_e5m2(std::ldexp(1.0f, -17)), 0x00);
  EXPECT_EQ(f32_to_e5m2(std::ldexp(3.0f, -17)), 0x02);
}

// ---- exhaustive round trips -----------------------------------------------------------------

// Every non-NaN pattern decodes and re-encodes to itself. Infinities round-trip unless the
// format saturates (e5m2: +-inf become +-max by design, checked here explicitly).
template <typename Bits, typename Enc, typename Dec>
void exhaustive_round_trip(int nbits, Enc enc, Dec dec, const char* name, bool saturating = false) {
  int nan_count = 0, failures = 0;
  for (uint32_t b = 0; b < (1u << nbits); ++b) {
    float f = dec(static_cast<Bits>(b));
    if (std::isnan(f)) {
      ++nan_count;
      EXPECT_TRUE(std::isnan(dec(enc(f)))) << name << " NaN 0x" << std::hex << b;
      continue;
    }
    if (saturating && std::isinf(f)) {
      float max = dec(enc(std::numeric_limits<float>::max()));
      EXPECT_EQ(dec(enc(f)), std::copysign(max, f)) << name << " inf 0x" << std::hex << b;
      continue;
    }
    Bits back = enc(f);
    if (back != b && failures++ < 10) {
      ADD_FAILURE() << name << " 0x" << std::hex << b << " -> " << f << " -> 0x" << +back;
    }
  }
  EXPECT_EQ(failures, 0) << name;
  EXPECT_GT(nan_count, 0) << name;
}

TEST(RoundTrip, F16Exhaustive) {
  exhaustive_round_trip<uint16_t>(16, f32_to_f16, f16_to_f32, "f16");
}
TEST(RoundTrip, BF16Exhaustive) {
  exhaustive_round_trip<uint16_t>(16, f32_to_bf16, bf16_to_f32, "bf16");
}
TEST(RoundTrip, E4M3Exhaustive) {
  exhaustive_round_trip<uint8_t>(8, f32_to_e4m3, e4m3_to_f32, "e4m3");
  int nans = 0;
  for (int b = 0; b < 256; ++b) nans += std::isnan(e4m3_to_f32(static_cast<uint8_t>(b)));
  EXPECT_EQ(nans, 2);  // only 0x7F and 0xFF; no infinities
  for (int b = 0; b < 256; ++b) EXPECT_FALSE(std::isinf(e4m3_to_f32(static_cast<uint8_t>(b))));
}
TEST(RoundTrip, E5M2Exhaustive) {
  exhaustive_round_trip<uint8_t>(8, f32_to_e5m2, e5m2_to_f32, "e5m2", /*saturating=*/true);
  int nans = 0;
  for (int b = 0; b < 256; ++b) nans += std::isnan(e5m2_to_f32(static_cast<uint8_t>(b)));
  EXPECT_EQ(nans, 6);  // S.11111.{01,10,11}
}

// Decoded values of the fp8 grids are strictly increasing over the positive codes, and each
// f32 between two neighbours rounds to the nearer one (checked at 1/4 and 3/4 of the gap).
template <typename Enc, typename Dec>
void check_monotone_nearest(uint8_t max_code, Enc enc, Dec dec, const char* name) {
  for (uint32_t b = 0; b < max_code; ++b) {
    float lo = dec(static_cast<uint8_t>(b)), hi = dec(static_cast<uint8_t>(b + 1));
    ASSERT_LT(lo, hi) << name << " 0x" << std::hex << b;
    EXPECT_EQ(enc(lo + (hi - lo) * 0.25f), b) << name << " 0x" << std::hex << b;
    EXPECT_EQ(enc(lo + (hi - lo) * 0.75f), b + 1) << name << " 0x" << std::hex << b;
  }
}

TEST(RoundTrip, Fp8NearestBetweenNeighbours) {
  check_monotone_nearest(0x7E, f32_to_e4m3, e4m3_to_f32, "e4m3");
  check_monotone_nearest(0x7B, f32_to_e5m2, e5m2_to_f32, "e5m2");
}

// Reference check over a sample of all f32 bit patterns (every 16381st: ~262k values covering
// every exponent): fp8 against a brute-force nearest-on-the-grid search with ties to the even
// code and saturation; f16 against the compiler's own _Float16 conversion where available.
template <typename Enc, typename Dec>
void check_against_grid(uint32_t max_code, Enc enc, Dec dec, const char* name) {
  double grid[128];
  for (uint32_t c = 0; c <= max_code; ++c) grid[c] = dec(static_cast<uint8_t>(c));
  int failures = 0;
  for (uint64_t i = 0; i < (1ull << 32); i += 16381) {
    float f = std::bit_cast<float>(static_cast<uint32_t>(i));
    uint8_t got = enc(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(dec(got))) << name;
      continue;
    }
    double a = std::fabs(static_cast<double>(f));
    uint32_t best = 0;
    if (a >= grid[max_code]) {
      best = max_code;
    } else {
      for (uint32_t c = 1; c <= max_code; ++c) {
        double d = std::fabs(a - grid[c]), db = std::fabs(a - grid[best]);
        if (d < db || (d == db && c % 2 == 0)) best = c;
      }
    }
    uint8_t want = static_cast<uint8_t>(best | (std::signbit(f) ? 0x80 : 0));
    if (got != want && failures++ < 10) {
      ADD_FAILURE() << name << " f32 0x" << std::hex << i << " (" << f << "): want 0x" << +want
                    << " got 0x" << +got;
    }
  }
  EXPECT_EQ(failures, 0) << name;
}

TEST(Reference, Fp8AgainstBruteForceGrid) {
  check_against_grid(0x7E, f32_to_e4m3, e4m3_to_f32, "e4m3");
  check_against_grid(0x7B, f32_to_e5m2, e5m2_to_f32, "e5m2");
}

#ifdef __FLT16_MAX__
TEST(Reference, F16AgainstCompilerFloat16) {
  int failures = 0;
  for (uint64_t i = 0; i < (1ull << 32); i += 4093) {
    float f = std::bit_cast<float>(static_cast<uint32_t>(i));
    uint16_t got = f32_to_f16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(got)));
      continue;
    }
    uint16_t want = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
    if (got != want && failures++ < 10) {
      ADD_FAILURE() << "f16 f32 0x" << std::hex << i << ": want 0x" << want << " got 0x" << got;
    }
    EXPECT_EQ(f16_to_f32(want), static_cast<float>(std::bit_cast<_Float16>(want)));
  }
  EXPECT_EQ(failures, 0);
}
#endif

// ---- convert --------------------------------------------------------------------------------

TEST(Convert, MatchesScalarFunctionsForEveryPair) {
  std::vector<float> src = {0.0f, -0.0f, 1.0f, -1.5f, 0.1f, 3.14159f, 300.0f, -1e5f, 1e-6f, 7.0f};
  const DType types[] = {DType::f32, DType::bf16, DType::f16, DType::e4m3, DType::e5m2};
  auto encode = [](float x, DType d, void* out, size_t i) {
    switch (d) {
      case DType::f32: static_cast<float*>(out)[i] = x; break;
      case DType::bf16: static_cast<uint16_t*>(out)[i] = f32_to_bf16(x); break;
      case DType::f16: static_cast<uint16_t*>(out)[i] = f32_to_f16(x); break;
      case DType::e4m3: static_cast<uint8_t*>(out)[i] = f32_to_e4m3(x); break;
      case DType::e5m2: static_cast<uint8_t*>(out)[i] = f32_to_e5m2(x); break;
      default: break;
    }
  };
  auto decode = [](DType d, const void* in, size_t i) -> float {
    switch (d) {
      case DType::f32: return static_cast<const float*>(in)[i];
      case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(in)[i]);
      case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(in)[i]);
      case DType::e4m3: return e4m3_to_f32(static_cast<const uint8_t*>(in)[i]);
      case DType::e5m2: return e5m2_to_f32(static_cast<const uint8_t*>(in)[i]);
      default: return 0;
    }
  };
  // Long enough to cross the internal chunk size.
  const size_t n = 2500;
  for (DType s : types) {
    for (DType d : types) {
      std::vector<uint8_t> a(n * 4), b(n * 4 + 1, 0xCD), expect(n * 4 + 1, 0xCD);
      for (size_t i = 0; i < n; ++i) encode(src[i % src.size()] * (1 + i / 1000), s, a.data(), i);
      for (size_t i = 0; i < n; ++i) encode(decode(s, a.data(), i), d, expect.data(), i);
      convert(a.data(), s, b.data(), d, n);
      EXPECT_EQ(std::memcmp(b.data(), expect.data(), n * dtype_size(d)), 0)
          << dtype_name(s) << " -> " << dtype_name(d);
      // Nothing written past n elements.
      EXPECT_EQ(b[n * dtype_size(d)], 0xCD) << dtype_name(s) << " -> " << dtype_name(d);
    }
  }
}

TEST(Convert, KnownValues) {
  float src[3] = {1.0f, 448.0f, 1e6f};
  uint8_t e4[3];
  convert(src, DType::f32, e4, DType::e4m3, 3);
  EXPECT_EQ(e4[0], 0x38);
  EXPECT_EQ(e4[1], 0x7E);
  EXPECT_EQ(e4[2], 0x7E);
  uint16_t h[3];
  convert(e4, DType::e4m3, h, DType::f16, 3);
  EXPECT_EQ(h[0], 0x3C00);
  EXPECT_EQ(h[1], f32_to_f16(448.0f));
  uint16_t bf[3];
  convert(h, DType::f16, bf, DType::bf16, 3);
  EXPECT_EQ(bf[0], 0x3F80);
}

TEST(Convert, IntegerTypesThrow) {
  int32_t i[2] = {1, 2};
  float f[2];
  EXPECT_THROW(convert(i, DType::i32, f, DType::f32, 2), Error);
  EXPECT_THROW(convert(f, DType::f32, i, DType::i32, 2), Error);
  uint16_t u[2];
  try {
    convert(u, DType::u16, f, DType::f32, 2);
    FAIL() << "expected ndt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("u16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ndt
