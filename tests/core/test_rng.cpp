#include "core/rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace ndt {
namespace {

using Block = std::array<uint32_t, 4>;

// Random123's published known-answer vectors for Philox4x32-10. Our counter is
// (index lo, index hi, stream lo, stream hi) and the key is (seed lo, seed hi).
TEST(Philox, Random123KnownAnswers) {
  EXPECT_EQ(philox(0, 0, 0), (Block{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox(~0ull, ~0ull, ~0ull), (Block{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull),
            (Block{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, PureFunctionOfPosition) {
  for (uint64_t i : {0ull, 1ull, 12345ull, 1ull << 40}) {
    EXPECT_EQ(philox(7, 9, i), philox(7, 9, i));
    EXPECT_EQ(uniform_at(7, 9, i), uniform_at(7, 9, i));
    EXPECT_EQ(normal_at(7, 9, i), normal_at(7, 9, i));
  }
  // Order of calls does not matter: draw backwards and compare with forwards.
  std::vector<float> fwd(100), bwd(100);
  for (int i = 0; i < 100; ++i) fwd[i] = normal_at(3, 4, i);
  for (int i = 99; i >= 0; --i) bwd[i] = normal_at(3, 4, i);
  EXPECT_EQ(fwd, bwd);
}

TEST(Philox, SeedStreamAndIndexAllMatter) {
  EXPECT_NE(philox(1, 2, 3), philox(2, 2, 3));
  EXPECT_NE(philox(1, 2, 3), philox(1, 3, 3));
  EXPECT_NE(philox(1, 2, 3), philox(1, 2, 4));
  // High halves of the 64-bit inputs are used too.
  EXPECT_NE(philox(1, 2, 3), philox(1 + (1ull << 32), 2, 3));
  EXPECT_NE(philox(1, 2, 3), philox(1, 2 + (1ull << 32), 3));
  EXPECT_NE(philox(1, 2, 3), philox(1, 2, 3 + (1ull << 32)));
}

TEST(HashName, StableAndDistinct) {
  // FNV-1a 64 reference values.
  EXPECT_EQ(hash_name(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(hash_name("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_NE(hash_name("wte"), hash_name("wpe"));
  EXPECT_EQ(hash_name("h.0.attn.qkv.weight"), hash_name("h.0.attn.qkv.weight"));
}

TEST(FillNormal, SubRangeMatchesFullFill) {
  // The sharded-init property: a shard filling [a, b) gets exactly those elements of the whole.
  const int64_t n = 10007;
  std::vector<float> full(n);
  fill_normal(full.data(), n, 0, 0.5f, 0.02f, 42, hash_name("w"));
  for (auto [a, b] : {std::pair<int64_t, int64_t>{0, 1}, {1, 4096}, {5000, 10007}, {9999, 10000},
                      {1234, 5678}}) {
    std::vector<float> part(b - a);
    fill_normal(part.data(), b - a, a, 0.5f, 0.02f, 42, hash_name("w"));
    for (int64_t k = 0; k < b - a; ++k) {
      ASSERT_EQ(part[k], full[a + k]) << "range [" << a << ", " << b << ") element " << k;
    }
  }
  // The fill is mean + std * normal_at at the same positions.
  EXPECT_EQ(full[17], 0.5f + 0.02f * normal_at(42, hash_name("w"), 17));
}

TEST(FillNormal, MomentsOfHundredThousandSamples) {
  // n = 1e5 samples: the standard error of the mean is 1/sqrt(n) ~ 0.0032 and of the std
  // ~ 1/sqrt(2n) ~ 0.0022; a tolerance of 0.015 is over six standard errors.
  const int64_t n = 100000;
  std::vector<float> v(n);
  fill_normal(v.data(), n, 0, 0.0f, 1.0f, 2024, hash_name("moments"));
  double sum = 0, sq = 0, fourth = 0;
  int beyond3 = 0;
  for (float x : v) {
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sq += static_cast<double>(x) * x;
    fourth += std::pow(static_cast<double>(x), 4);
    beyond3 += std::fabs(x) > 3.0f;
  }
  double mean = sum / n;
  double var = sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.015);
  EXPECT_NEAR(std::sqrt(var), 1.0, 0.015);
  // Fourth moment 3 for a Gaussian (SE ~ sqrt(96/n) ~ 0.03); P(|x| > 3) = 0.0027 (~270 +- 16).
  EXPECT_NEAR(fourth / n, 3.0, 0.2);
  EXPECT_NEAR(beyond3, 270, 80);
  // Mean and std parameters are applied.
  std::vector<float> w(n);
  fill_normal(w.data(), n, 0, 3.0f, 0.5f, 2024, hash_name("moments"));
  EXPECT_FLOAT_EQ(w[123], 3.0f + 0.5f * v[123]);
}

TEST(Uniform, RangeAndMean) {
  const int n = 100000;
  double sum = 0;
  float lo = 1, hi = 0;
  for (int i = 0; i < n; ++i) {
    float u = uniform_at(5, 6, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  // SE of the mean is sqrt(1/12 / n) ~ 0.0009.
  EXPECT_NEAR(sum / n, 0.5, 0.006);
  EXPECT_LT(lo, 0.001f);
  EXPECT_GT(hi, 0.999f);
}

TEST(FillNormal, DifferentStreamsAndSeedsDiffer) {
  const int64_t n = 1000;
  std::vector<float> a(n), b(n), c(n);
  fill_normal(a.data(), n, 0, 0.0f, 1.0f, 1, hash_name("wq"));
  fill_normal(b.data(), n, 0, 0.0f, 1.0f, 1, hash_name("wk"));
  fill_normal(c.data(), n, 0, 0.0f, 1.0f, 2, hash_name("wq"));
  int same_ab = 0, same_ac = 0;
  double corr = 0;
  for (int64_t i = 0; i < n; ++i) {
    same_ab += a[i] == b[i];
    same_ac += a[i] == c[i];
    corr += static_cast<double>(a[i]) * b[i];
  }
  EXPECT_EQ(same_ab, 0);
  EXPECT_EQ(same_ac, 0);
  // Uncorrelated: |sample correlation| ~ 1/sqrt(n) ~ 0.03.
  EXPECT_LT(std::fabs(corr / n), 0.15);
}

}  // namespace
}  // namespace ndt
