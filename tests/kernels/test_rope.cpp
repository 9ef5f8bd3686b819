// RoPE ("rotate half", HF Llama): reference values, identity at position 0, position
// offsets, in-place use, norm preservation, backward as the inverse rotation; explicit
// positions per row (context-parallel runs, documents restarting per sequence); Llama 3's
// frequency scaling.
#include "kernels/cpu/rope.h"

#include "../common/gradcheck.h"
#include "core/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace ndt::cpu {
namespace {

using ndt::testing::expect_gradient_matches;
using ndt::testing::random_vector;
using ndt::testing::weighted_sum;

constexpr float kTheta = 10000.0f;

TEST(Rope, ForwardMatchesReference) {
  const int B = 2, T = 5, H = 3, D = 8, off = 3;
  const int64_t n = static_cast<int64_t>(B) * T * H * D;
  auto x = random_vector(n, 1);
  std::vector<float> out(n, 9.0f);
  rope_forward(out.data(), x.data(), B, T, H, D, off, kTheta);
  const int half = D / 2;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < H; ++h) {
        const int64_t base = ((static_cast<int64_t>(b) * T + t) * H + h) * D;
        for (int i = 0; i < half; ++i) {
          double angle = (off + t) * std::pow(10000.0, -2.0 * i / D);
          double x1 = x[base + i], x2 = x[base + i + half];
          double o1 = x1 * std::cos(angle) - x2 * std::sin(angle);
          double o2 = x2 * std::cos(angle) + x1 * std::sin(angle);
          EXPECT_NEAR(out[base + i], o1, 1e-5) << b << "," << t << "," << h << "," << i;
          EXPECT_NEAR(out[base + i + half], o2, 1e-5) << b << "," << t << "," << h << "," << i;
        }
      }
    }
  }
}

TEST(Rope, RotateHalfConventionOnUnitVector) {
  // D = 4, theta = 10000: pair (0, 2) turns at 1 rad per position, pair (1, 3) at 0.01.
  float x[4] = {1.0f, 1.0f, 0.0f, 0.0f}, out[4];
  rope_forward(out, x, 1, 1, 1, 4, /*pos_offset=*/1, kTheta);
  EXPECT_NEAR(out[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(out[2], std::sin(1.0), 1e-6);
  EXPECT_NEAR(out[1], std::cos(0.01), 1e-6);
  EXPECT_NEAR(out[3], std::sin(0.01), 1e-6);
}

TEST(Rope, PositionZeroIsIdentity) {
  const int B = 2, H = 3, D = 16;
  const int64_t n = static_cast<int64_t>(B) * H * D;
  auto x = random_vector(n, 2);
  std::vector<float> out(n);
  rope_forward(out.data(), x.data(), B, 1, H, D, 0, kTheta);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out[i], x[i]) << "index " << i;
}

TEST(Rope, OffsetShiftsPositions) {
  // Rope on all T rows from offset 0 equals, on rows [T/2, T), rope on those rows alone
  // with offset T/2 (what a sequence shard does).
  const int B = 2, T = 8, H = 2, D = 12, half_t = T / 2;
  const int64_t row = static_cast<int64_t>(H) * D;
  auto x = random_vector(B * T * row, 3);
  std::vector<float> full(B * T * row);
  rope_forward(full.data(), x.data(), B, T, H, D, 0, kTheta);
  std::vector<float> second(B * half_t * row), out(B * half_t * row);
  for (int b = 0; b < B; ++b) {
    for (int64_t k = 0; k < half_t * row; ++k) {
      second[b * half_t * row + k] = x[(b * T + half_t) * row + k];
    }
  }
  rope_forward(out.data(), second.data(), B, half_t, H, D, half_t, kTheta);
  for (int b = 0; b < B; ++b) {
    for (int64_t k = 0; k < half_t * row; ++k) {
      EXPECT_EQ(out[b * half_t * row + k], full[(b * T + half_t) * row + k]) << b << "," << k;
    }
  }
  // And the offset is not ignored: offset 0 on the shard gives different values.
  std::vector<float> wrong(out.size());
  rope_forward(wrong.data(), second.data(), B, half_t, H, D, 0, kTheta);
  EXPECT_NE(wrong, out);
}

TEST(Rope, PositionsPickEachRowsRotation) {
  // A context-parallel rank's rows: chunks 1 and 2 of 4 (zigzag for cp = 2, rank 1), given
  // by position; each equals the whole sequence's row at that position, forward and back.
  const int B = 2, T = 8, H = 2, D = 6, chunk = T / 4;
  const int64_t row = static_cast<int64_t>(H) * D;
  auto x = random_vector(B * T * row, 5);
  auto g = random_vector(B * T * row, 6);
  std::vector<float> full(B * T * row), dfull(B * T * row, 0.0f);
  rope_forward(full.data(), x.data(), B, T, H, D, 0, kTheta);
  rope_backward(dfull.data(), g.data(), B, T, H, D, 0, kTheta);
  std::vector<int32_t> positions;
  for (int c : {1, 2}) {
    for (int t = 0; t < chunk; ++t) positions.push_back(c * chunk + t);
  }
  const int Tl = static_cast<int>(positions.size());
  // The same positions for every sequence, [B, Tl] (inserted from a copy: a vector's
  // insert may not take a range of the vector itself).
  const std::vector<int32_t> one_sequence = positions;
  for (int b = 1; b < B; ++b) positions.insert(positions.end(), one_sequence.begin(), one_sequence.end());
  std::vector<float> local(B * Tl * row), dlocal_in(B * Tl * row);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < Tl; ++t) {
      for (int64_t k = 0; k < row; ++k) {
        local[(b * Tl + t) * row + k] = x[(b * T + positions[t]) * row + k];
        dlocal_in[(b * Tl + t) * row + k] = g[(b * T + positions[t]) * row + k];
      }
    }
  }
  std::vector<float> out(local.size()), dout(local.size(), 0.0f);
  rope_forward_at(out.data(), local.data(), B, Tl, H, D, positions.data(), kTheta);
  rope_backward_at(dout.data(), dlocal_in.data(), B, Tl, H, D, positions.data(), kTheta);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < Tl; ++t) {
      for (int64_t k = 0; k < row; ++k) {
        EXPECT_EQ(out[(b * Tl + t) * row + k], full[(b * T + positions[t]) * row + k]) << b << "," << t << "," << k;
        EXPECT_EQ(dout[(b * Tl + t) * row + k], dfull[(b * T + positions[t]) * row + k]) << b << "," << t << "," << k;
      }
    }
  }
}

// Document boundaries: each sequence's positions restart at its own document starts, so
// the rows of one call have different positions per sequence. Each row must be rotated
// exactly as a lone row at its position (rope_forward with that offset), forward and
// backward, bit for bit (the table entries are computed the same way).
// Catches: the table indexed by t instead of the row's position, or shared across sequences.
TEST(Rope, EachSequenceAtItsOwnPositions) {
  const int B = 3, T = 7, H = 2, D = 6;
  const int64_t row = static_cast<int64_t>(H) * D;
  const std::vector<int32_t> positions = {0, 1, 2, 0, 1, 0, 1,   // documents at 0, 3, 5
                                          0, 1, 2, 3, 4, 5, 6,   // one document
                                          9, 10, 0, 0, 1, 2, 3};  // a tail from position 9, then documents
  auto x = random_vector(B * T * row, 7);
  auto g = random_vector(B * T * row, 8);
  std::vector<float> out(x.size()), dx(x.size(), 0.0f);
  rope_forward_at(out.data(), x.data(), B, T, H, D, positions.data(), kTheta);
  rope_backward_at(dx.data(), g.data(), B, T, H, D, positions.data(), kTheta);
  for (int64_t r = 0; r < int64_t{B} * T; ++r) {
    std::vector<float> want(row), dwant(row, 0.0f);
    rope_forward(want.data(), x.data() + r * row, 1, 1, H, D, positions[r], kTheta);
    rope_backward(dwant.data(), g.data() + r * row, 1, 1, H, D, positions[r], kTheta);
    for (int64_t k = 0; k < row; ++k) {
      EXPECT_EQ(out[r * row + k], want[k]) << "row " << r << " element " << k;
      EXPECT_EQ(dx[r * row + k], dwant[k]) << "row " << r << " element " << k;
    }
  }
}

TEST(Rope, NegativePositionIsRefused) {
  const int H = 1, D = 4;
  std::vector<float> x(2 * H * D, 1.0f), out(x.size());
  const std::vector<int32_t> positions = {0, -3};
  try {
    rope_forward_at(out.data(), x.data(), 1, 2, H, D, positions.data(), kTheta);
    ADD_FAILURE() << "position -3 accepted";
  } catch (const ndt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("position -3 of row 1"), std::string::npos) << e.what();
  }
}

TEST(Rope, InPlaceMatchesOutOfPlace) {
  const int B = 2, T = 6, H = 3, D = 10;
  const int64_t n = static_cast<int64_t>(B) * T * H * D;
  auto x = random_vector(n, 4);
  std::vector<float> out(n);
  rope_forward(out.data(), x.data(), B, T, H, D, 5, kTheta);
  std::vector<float> inplace = x;
  rope_forward(inplace.data(), inplace.data(), B, T, H, D, 5, kTheta);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(inplace[i], out[i]) << "index " << i;
}

TEST(Rope, PreservesNormOfEachRotateHalfPair) {
  const int B = 1, T = 9, H = 2, D = 32;
  const int64_t n = static_cast<int64_t>(B) * T * H * D;
  auto x = random_vector(n, 5);
  std::vector<float> out(n);
  rope_forward(out.data(), x.data(), B, T, H, D, 100, kTheta);
  const int half = D / 2;
  for (int64_t base = 0; base < n; base += D) {
    for (int i = 0; i < half; ++i) {
      double before = std::hypot(x[base + i], x[base + i + half]);
      double after = std::hypot(out[base + i], out[base + i + half]);
      EXPECT_NEAR(after, before, 1e-5 * (1 + before)) << "vector at " << base << " pair " << i;
    }
  }
}

TEST(Rope, BackwardMatchesFiniteDifferencesAndInvertsForward) {
  const int B = 2, T = 3, H = 2, D = 8, off = 7;
  const int64_t n = static_cast<int64_t>(B) * T * H * D;
  auto x = random_vector(n, 6);
  auto wl = random_vector(n, 7);
  std::vector<float> out(n);
  auto loss = [&] {
    rope_forward(out.data(), x.data(), B, T, H, D, off, kTheta);
    return weighted_sum(out.data(), wl.data(), n);
  };
  std::vector<float> dx(n, 0.0f);
  rope_backward(dx.data(), wl.data(), B, T, H, D, off, kTheta);
  // Linear map: differences exact up to float rounding. eps 1e-2, rtol 1e-2, atol 1e-3.
  expect_gradient_matches(loss, x.data(), n, dx.data(), "dinp", 1e-2f, 1e-2, 1e-3, n);

  // Backward of a rotation is its inverse: backward(forward(x)) == x.
  loss();
  std::vector<float> back(n, 0.0f);
  rope_backward(back.data(), out.data(), B, T, H, D, off, kTheta);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(back[i], x[i], 1e-5) << "index " << i;
}

TEST(Rope, BackwardAccumulates) {
  const int B = 1, T = 4, H = 2, D = 6;
  const int64_t n = static_cast<int64_t>(B) * T * H * D;
  auto dout = random_vector(n, 8);
  std::vector<float> d1(n, 0.0f), d2(n, 0.0f);
  rope_backward(d1.data(), dout.data(), B, T, H, D, 2, kTheta);
  rope_backward(d2.data(), dout.data(), B, T, H, D, 2, kTheta);
  rope_backward(d2.data(), dout.data(), B, T, H, D, 2, kTheta);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(d2[i], 2 * d1[i], 1e-6) << "index " << i;
}

// Llama 3's remapping as transformers' _compute_llama3_parameters writes it, in double.
double llama3_frequency(double freq, double factor, double low, double high, double original) {
  const double wavelength = 2 * 3.14159265358979323846 / freq;
  if (wavelength < original / high) return freq;
  if (wavelength > original / low) return freq / factor;
  const double smooth = (original / wavelength - low) / (high - low);
  return (1 - smooth) * freq / factor + smooth * freq;
}

// Catches: the llama3 scaling applied to the wrong band, without the interpolation
// between the bands, or not at all; theta = 100, D = 16 and an original context of 64
// put frequencies in each of the three bands (kept, interpolated, divided by the factor).
TEST(Rope, Llama3ScalingRemapsTheFrequenciesAsTransformersDoes) {
  const int B = 1, T = 3, H = 2, D = 16, off = 40;
  RopeFrequencies f(100.0f);
  f.scaling_factor = 8.0f;
  f.low_freq_factor = 1.0f;
  f.high_freq_factor = 4.0f;
  f.original_max_seq_len = 64.0f;
  std::vector<double> expected(D / 2);
  int kept = 0, scaled = 0, between = 0;
  for (int i = 0; i < D / 2; ++i) {
    const double freq = std::pow(100.0, -2.0 * i / D);
    expected[i] = llama3_frequency(freq, 8, 1, 4, 64);
    kept += expected[i] == freq;
    scaled += expected[i] == freq / 8;
    between += expected[i] != freq && expected[i] != freq / 8;
  }
  ASSERT_GT(kept, 0);
  ASSERT_GT(scaled, 0);
  ASSERT_GT(between, 0);
  const std::vector<double> got = rope_inverse_frequencies(D, f);
  for (int i = 0; i < D / 2; ++i) EXPECT_NEAR(got[i], expected[i], 1e-15 * expected[i]) << i;
  const int64_t n = static_cast<int64_t>(B) * T * H * D;
  auto x = random_vector(n, 4);
  std::vector<float> out(n);
  rope_forward(out.data(), x.data(), B, T, H, D, off, f);
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      const int64_t base = (static_cast<int64_t>(t) * H + h) * D;
      for (int i = 0; i < D / 2; ++i) {
        const double angle = (off + t) * expected[i], x1 = x[base + i], x2 = x[base + i + D / 2];
        EXPECT_NEAR(out[base + i], x1 * std::cos(angle) - x2 * std::sin(angle), 1e-5) << t << "," << i;
        EXPECT_NEAR(out[base + i + D / 2], x2 * std::cos(angle) + x1 * std::sin(angle), 1e-5) << t << "," << i;
      }
    }
  }
}

}  // namespace
}  // namespace ndt::cpu
