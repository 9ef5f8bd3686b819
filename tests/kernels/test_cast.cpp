// The bulk fp32 <-> bf16/f16 casts (kernels/cpu/cast.h) against the scalar conversions of
// core/dtype.h, bit for bit: every 16-bit pattern decoded; encoded, every 16-bit value, the
// midpoints between neighbours (ties) and their f32 neighbours, random bit patterns
// (NaN, inf, subnormals) and values past f16's range; large arrays take the threaded path.
#include "kernels/cpu/cast.h"

#include "../common/errors.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/kernels.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace ndt::cpu {
namespace {

uint16_t scalar_encode(DType dtype, float x) {
  return dtype == DType::bf16 ? f32_to_bf16(x) : f32_to_f16(x);
}
float scalar_decode(DType dtype, uint16_t bits) {
  return dtype == DType::bf16 ? bf16_to_f32(bits) : f16_to_f32(bits);
}

// Floats that probe every rounding decision of the dtype: each 16-bit value, the midpoint
// to the next one (a tie), and the f32 neighbours of both; then random f32 bit patterns
// and a few hand-picked ones (f16: overflow at 65520, the smallest subnormals).
std::vector<float> probe_floats(DType dtype) {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float x = scalar_decode(dtype, static_cast<uint16_t>(h));
    const uint32_t u = std::bit_cast<uint32_t>(x);
    v.push_back(x);
    v.push_back(std::bit_cast<float>(u + 1));
    v.push_back(std::bit_cast<float>(u - 1));
    const float next = scalar_decode(dtype, static_cast<uint16_t>(h + 1));
    // Same sign and both finite: the midpoint in double is exact in f32 (one more bit).
    if (std::isfinite(x) && std::isfinite(next) && std::signbit(x) == std::signbit(next)) {
      const float mid = static_cast<float>((static_cast<double>(x) + next) / 2);
      const uint32_t m = std::bit_cast<uint32_t>(mid);
      v.push_back(mid);
      v.push_back(std::bit_cast<float>(m + 1));
      v.push_back(std::bit_cast<float>(m - 1));
    }
  }
  for (uint64_t i = 0; i < 200000; ++i) {
    v.push_back(std::bit_cast<float>(philox(7, 3, i)[0]));  // any bits: NaNs, inf, subnormals
  }
  for (float x : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e6f, 0x1p-24f,
                  0x1p-25f, 0x1.8p-25f, 0x1p-26f, 0x1.8p-24f, 0x1p-14f, 0x1.ffcp-15f, 1e-40f,
                  3.4028235e38f, std::bit_cast<float>(0x7F800000u), std::bit_cast<float>(0xFFC00001u),
                  std::bit_cast<float>(0x7F800001u), std::bit_cast<float>(0x7FBFFFFFu)}) {
    v.push_back(x);
  }
  return v;
}

class CastTest : public ::testing::TestWithParam<DType> {};

TEST_P(CastTest, FromLowpMatchesScalarOnEveryPattern) {
  const DType dtype = GetParam();
  std::vector<uint16_t> bits(0x10000);
  for (uint32_t h = 0; h < 0x10000u; ++h) bits[h] = static_cast<uint16_t>(h);
  std::vector<float> got(bits.size());
  cast_from_lowp(dtype, bits.data(), got.data(), static_cast<int64_t>(bits.size()));
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    ASSERT_EQ(std::bit_cast<uint32_t>(got[h]),
              std::bit_cast<uint32_t>(scalar_decode(dtype, static_cast<uint16_t>(h))))
        << dtype_name(dtype) << " pattern 0x" << std::hex << h;
  }
}

TEST_P(CastTest, ToLowpMatchesScalarOnTiesSpecialsAndRandomBits) {
  const DType dtype = GetParam();
  const std::vector<float> x = probe_floats(dtype);
  std::vector<uint16_t> got(x.size());
  cast_to_lowp(dtype, x.data(), got.data(), static_cast<int64_t>(x.size()));
  int64_t mismatches = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint16_t want = scalar_encode(dtype, x[i]);
    if (got[i] != want && ++mismatches <= 10) {
      ADD_FAILURE() << dtype_name(dtype) << " of f32 bits 0x" << std::hex
                    << std::bit_cast<uint32_t>(x[i]) << ": got 0x" << got[i] << ", want 0x" << want;
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << x.size() << " values";
}

TEST_P(CastTest, RoundToLowpIsEncodeThenDecode) {
  const DType dtype = GetParam();
  std::vector<float> x = probe_floats(dtype);
  const std::vector<float> in = x;
  round_to_lowp(dtype, x.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(x[i]),
              std::bit_cast<uint32_t>(scalar_decode(dtype, scalar_encode(dtype, in[i]))))
        << dtype_name(dtype) << " of f32 bits 0x" << std::hex << std::bit_cast<uint32_t>(in[i]);
  }
}

// Sizes around the threading threshold, with an odd tail; the routed kernels:: forms
// give the same bits.
TEST_P(CastTest, ThreadedAndRoutedFormsAgree) {
  const DType dtype = GetParam();
  for (int64_t n : {int64_t{1}, int64_t{65535}, int64_t{65536}, int64_t{1000003}}) {
    std::vector<float> x(static_cast<size_t>(n));
    fill_normal(x.data(), n, 0, 0.0f, 100.0f, 11, static_cast<uint64_t>(n));
    std::vector<uint16_t> bits(x.size()), routed(x.size());
    cast_to_lowp(dtype, x.data(), bits.data(), n);
    kernels::cast_to_lowp(dtype, x.data(), routed.data(), n);
    std::vector<float> back(x.size()), rounded = x;
    kernels::cast_from_lowp(dtype, bits.data(), back.data(), n);
    kernels::round_to_lowp(dtype, rounded.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits[i], scalar_encode(dtype, x[i])) << "n=" << n << " i=" << i;
      ASSERT_EQ(routed[i], bits[i]) << "n=" << n << " i=" << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(scalar_decode(dtype, bits[i])));
      ASSERT_EQ(std::bit_cast<uint32_t>(rounded[i]), std::bit_cast<uint32_t>(back[i]));
    }
  }
}

// Rows cast into a wider stride: each row the bulk cast's bits, the padding 0 (the poison
// below overwritten), on one thread and across the threading threshold, routed or not.
TEST_P(CastTest, RowsIntoAWiderStrideAreTheBulkCastsBitsThenZeros) {
  const DType dtype = GetParam();
  for (const auto& [rows, cols, ld] : {std::tuple<int64_t, int64_t, int64_t>{3, 5, 32}, {256, 50257, 50272},
                                       {4, 64, 64}, {0, 7, 32}}) {
    std::vector<float> x(static_cast<size_t>(rows * cols));
    fill_normal(x.data(), rows * cols, 0, 0.0f, 100.0f, 12, static_cast<uint64_t>(cols));
    std::vector<uint16_t> contiguous(x.size());
    cast_to_lowp(dtype, x.data(), contiguous.data(), rows * cols);
    for (bool routed : {false, true}) {
      std::vector<uint16_t> padded(static_cast<size_t>(rows * ld), 0xFFFF);
      if (routed) {
        kernels::cast_rows_to_lowp(dtype, x.data(), rows, cols, padded.data(), ld);
      } else {
        cast_rows_to_lowp(dtype, x.data(), rows, cols, padded.data(), ld);
      }
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < ld; ++c) {
          const uint16_t want = c < cols ? contiguous[static_cast<size_t>(r * cols + c)] : uint16_t{0};
          ASSERT_EQ(padded[static_cast<size_t>(r * ld + c)], want) << rows << "x" << cols << " ld " << ld << " r=" << r
                                                                   << " c=" << c << " routed=" << routed;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CastTest, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Cast, RefusesOtherDtypesByName) {
  float x = 1.0f;
  uint16_t b = 0;
  try {
    cast_to_lowp(DType::e4m3, &x, &b, 1);
    FAIL() << "cast_to_lowp accepted e4m3";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("e4m3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cast_from_lowp(DType::f32, &b, &x, 1), Error);
  EXPECT_THROW(round_to_lowp(DType::i32, &x, 1), Error);
  testing::expect_error([&] { cast_rows_to_lowp(DType::bf16, &x, 1, 8, &b, 4); },
                        {"cast_rows_to_lowp", "1 rows of 8 columns", "rows 4 apart"});
  testing::expect_error([&] { cast_rows_to_lowp(DType::f32, &x, 1, 1, &b, 1); }, {"cast_rows_to_lowp", "f32"});
}

}  // namespace
}  // namespace ndt::cpu
