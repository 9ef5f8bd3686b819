// fp8 delayed scaling: the amax window and the scale it gives against hand-computed
// values (both algorithms, with a margin, zero / inf / NaN amaxes), checkpoint state and
// its validation, amax_of, and quantize_fp8 bit for bit against the scalar route
// x * scale -> f32_to_e4m3 / f32_to_e5m2 -> decode -> f32_to_bf16.
#include "core/dtype.h"
#include "core/error.h"
#include "model/fp8_scaling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace ndt {
namespace {

using Algo = Fp8ScalingConfig::AmaxAlgo;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Fp8ScalingConfig config(int history, Algo algo, int margin = 0) {
  Fp8ScalingConfig c;
  c.amax_history_len = history;
  c.algo = algo;
  c.margin = margin;
  return c;
}

template <typename F>
void expect_error(F&& f, const std::string& text) {
  try {
    f();
    FAIL() << "no error, expected: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

float decode(DType fmt, uint8_t code) { return fmt == DType::e4m3 ? e4m3_to_f32(code) : e5m2_to_f32(code); }

// The scalar route quantize_fp8 must match bit for bit.
uint16_t reference(DType fmt, float x, float scale) {
  const float y = x * scale;
  return f32_to_bf16(fmt == DType::e4m3 ? e4m3_to_f32(f32_to_e4m3(y)) : e5m2_to_f32(f32_to_e5m2(y)));
}

void expect_matches_reference(DType fmt, const std::vector<float>& x, float scale) {
  std::vector<uint16_t> out(x.size(), 0xDEAD);
  quantize_fp8(fmt, x.data(), scale, out.data(), static_cast<int64_t>(x.size()));
  int mismatches = 0;
  for (size_t i = 0; i < x.size() && mismatches < 10; ++i) {
    const uint16_t want = reference(fmt, x[i], scale);
    if (out[i] != want) {
      ++mismatches;
      ADD_FAILURE() << dtype_name(fmt) << " x " << x[i] << " (bits 0x" << std::hex
                    << std::bit_cast<uint32_t>(x[i]) << ") scale " << std::dec << scale << ": got 0x"
                    << std::hex << out[i] << " want 0x" << want;
    }
  }
}

TEST(DelayedScale, MaxAlgoFollowsTheWindow) {
  DelayedScale s(DType::e4m3, config(3, Algo::max));
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_EQ(s.amax_history(), (std::vector<float>{0, 0, 0}));
  const float amax[] = {2, 8, 1, 1, 0.5f};
  const float scale_after[] = {224, 56, 56, 56, 448};  // 448 / max of the last three
  const std::vector<float> history_after[] = {{0, 0, 2}, {0, 2, 8}, {2, 8, 1}, {8, 1, 1}, {1, 1, 0.5f}};
  for (int t = 0; t < 5; ++t) {
    s.record(amax[t]);
    EXPECT_EQ(s.amax_history(), history_after[t]) << "step " << t;
    EXPECT_EQ(s.scale(), scale_after[t]) << "step " << t;
  }
}

TEST(DelayedScale, MostRecentAlgoUsesTheNewestAmax) {
  DelayedScale s(DType::e4m3, config(3, Algo::most_recent));
  const float amax[] = {2, 8, 1, 1, 0.5f};
  const float scale_after[] = {224, 56, 448, 448, 896};
  for (int t = 0; t < 5; ++t) {
    s.record(amax[t]);
    EXPECT_EQ(s.scale(), scale_after[t]) << "step " << t;
  }
  EXPECT_EQ(s.amax_history(), (std::vector<float>{1, 1, 0.5f}));
}

TEST(DelayedScale, MarginLeavesHeadroom) {
  DelayedScale s(DType::e5m2, config(2, Algo::max, 2));
  s.record(7);
  EXPECT_EQ(s.scale(), 2048.0f);  // 57344 / 7 / 2^2
  s.record(3);
  EXPECT_EQ(s.scale(), 2048.0f);  // 7 is still in the window
  s.record(3);
  EXPECT_EQ(s.scale(), std::ldexp(57344.0f / 3.0f, -2));
  DelayedScale e(DType::e4m3, config(1, Algo::max, 1));
  e.record(0.25f);
  EXPECT_EQ(e.scale(), 896.0f);  // 448 / 0.25 / 2
}

TEST(DelayedScale, ZeroInfAndNanAmaxKeepThePreviousScale) {
  // Nothing nonzero and finite yet: the scale stays 1.
  DelayedScale s(DType::e4m3, config(3, Algo::max));
  s.record(0);
  EXPECT_EQ(s.scale(), 1.0f);
  s.record(kInf);
  EXPECT_EQ(s.scale(), 1.0f);
  s.record(4);  // window {0, inf, 4}: its max is inf
  EXPECT_EQ(s.scale(), 1.0f);
  s.record(4);
  EXPECT_EQ(s.scale(), 1.0f);
  s.record(4);  // the inf has rolled out: {4, 4, 4}
  EXPECT_EQ(s.scale(), 112.0f);
  s.record(kNaN);  // NaN anywhere in the window blocks updates until it rolls out
  s.record(1);
  s.record(1);
  EXPECT_EQ(s.scale(), 112.0f);
  s.record(1);
  EXPECT_EQ(s.scale(), 448.0f);

  DelayedScale r(DType::e4m3, config(3, Algo::most_recent));
  r.record(4);
  EXPECT_EQ(r.scale(), 112.0f);
  for (float bad : {0.0f, kInf, kNaN}) {
    r.record(bad);
    EXPECT_EQ(r.scale(), 112.0f) << bad;
  }
  r.record(8);
  EXPECT_EQ(r.scale(), 56.0f);
}

TEST(DelayedScale, ScaleStaysANormalFloat) {
  DelayedScale tiny(DType::e5m2, config(1, Algo::max));
  tiny.record(1e-38f);  // 57344 / 1e-38 overflows f32
  EXPECT_EQ(tiny.scale(), FLT_MAX);
  DelayedScale margin(DType::e4m3, config(1, Algo::max, 200));
  margin.record(1);  // 448 / 2^200 underflows
  EXPECT_EQ(margin.scale(), FLT_MIN);
}

TEST(DelayedScale, RejectsNegativeAmaxAndNonFp8Formats) {
  DelayedScale s(DType::e4m3, config(2, Algo::max));
  expect_error([&] { s.record(-1); }, "fp8 amax -1");
  expect_error([] { DelayedScale b(DType::bf16, Fp8ScalingConfig{}); }, "got bf16");
  expect_error([] { fp8_max(DType::f32); }, "got f32");
  EXPECT_EQ(fp8_max(DType::e4m3), 448.0f);
  EXPECT_EQ(fp8_max(DType::e5m2), 57344.0f);
  EXPECT_EQ(fp8_max(DType::e4m3), e4m3_to_f32(0x7E));
  EXPECT_EQ(fp8_max(DType::e5m2), e5m2_to_f32(0x7B));
}

TEST(DelayedScale, StateRoundTrip) {
  const Fp8ScalingConfig c = config(4, Algo::max, 1);
  DelayedScale s(DType::e5m2, c);
  for (float a : {3.0f, 0.0f, 12.0f, 5.0f, 1.0f}) s.record(a);
  const DelayedScaleState st = s.state();
  EXPECT_EQ(st.amax_history, (std::vector<float>{0, 12, 5, 1}));
  EXPECT_EQ(st.scale, std::ldexp(57344.0f / 12.0f, -1));
  DelayedScale r(DType::e5m2, c);
  r.restore(st);
  EXPECT_EQ(r.amax_history(), s.amax_history());
  EXPECT_EQ(r.scale(), s.scale());
  for (float a : {2.0f, 0.5f, 0.5f, 0.5f}) {
    s.record(a);
    r.record(a);
    EXPECT_EQ(r.scale(), s.scale());
  }
  EXPECT_EQ(r.scale(), std::ldexp(57344.0f / 2.0f, -1));
}

TEST(DelayedScale, ValidationErrorsNameTheSettingAndValue) {
  expect_error([] { config(0, Algo::max).validate(); }, "precision.fp8_amax_history = 0");
  expect_error([] { DelayedScale s(DType::e4m3, config(2, Algo::max, -1)); }, "precision.fp8_margin = -1");
  DelayedScale s(DType::e4m3, config(3, Algo::max));
  s.record(2);
  expect_error([&] { s.restore({{1, 2}, 4}); }, "holds 2 values but precision.fp8_amax_history = 3");
  expect_error([&] { s.restore({{1, -2, 3}, 4}); }, "negative value -2");
  expect_error([&] { s.restore({{1, 2, 3}, 0}); }, "fp8 scale 0");
  expect_error([&] { s.restore({{1, 2, 3}, kInf}); }, "fp8 scale inf");
  expect_error([&] { s.restore({{1, 2, 3}, kNaN}); }, "fp8 scale nan");
  EXPECT_EQ(s.scale(), 224.0f);  // a rejected state changes nothing
  EXPECT_EQ(s.amax_history(), (std::vector<float>{0, 0, 2}));
  s.restore({{1, kInf, kNaN}, 4});  // inf and NaN amaxes are legitimate history
  EXPECT_EQ(s.scale(), 4.0f);
}

TEST(AmaxOf, MaxMagnitudeWithNanPropagating) {
  EXPECT_EQ(amax_of(nullptr, 0), 0.0f);
  std::vector<float> x = {1, -5, 3, 0.5f, -0.0f};
  EXPECT_EQ(amax_of(x.data(), 5), 5.0f);
  x[3] = -kInf;
  EXPECT_EQ(amax_of(x.data(), 5), kInf);
  for (int64_t n : {int64_t{5}, int64_t{33}, int64_t{100003}}) {
    std::vector<float> y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(i % 1000) * (i % 3 ? -0.5f : 0.25f);
    float want = 0;
    for (float v : y) want = std::max(want, std::fabs(v));
    EXPECT_EQ(amax_of(y.data(), n), want) << n;
    for (int64_t pos : {int64_t{0}, n / 2, n - 1}) {
      const float keep = y[pos];
      y[pos] = -kNaN;
      EXPECT_TRUE(std::isnan(amax_of(y.data(), n))) << n << " " << pos;
      y[pos] = keep;
    }
  }
}

TEST(QuantizeFp8, EveryFp8ValueIsExactInBf16) {
  for (DType fmt : {DType::e4m3, DType::e5m2}) {
    for (int code = 0; code < 256; ++code) {
      const float v = decode(fmt, static_cast<uint8_t>(code));
      const uint16_t b = f32_to_bf16(v);
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(bf16_to_f32(b)));
      } else {
        EXPECT_EQ(std::bit_cast<uint32_t>(bf16_to_f32(b)), std::bit_cast<uint32_t>(v))
            << dtype_name(fmt) << " code " << code;
      }
      // Each fp8 value is a fixed point of the quantiser (inf saturates for e5m2).
      uint16_t q;
      quantize_fp8(fmt, &v, 1.0f, &q, 1);
      if (std::isinf(v)) {
        EXPECT_EQ(bf16_to_f32(q), std::copysign(fp8_max(fmt), v));
      } else if (!std::isnan(v)) {
        EXPECT_EQ(q, b) << dtype_name(fmt) << " code " << code;
      }
    }
  }
}

TEST(QuantizeFp8, TiesSubnormalsSaturationAndNan) {
  for (DType fmt : {DType::e4m3, DType::e5m2}) {
    std::vector<float> x;
    // Every midpoint between neighbouring finite values (and their negatives): ties.
    std::vector<float> values;
    for (int code = 0; code < 128; ++code) {
      const float v = decode(fmt, static_cast<uint8_t>(code));
      if (std::isfinite(v)) values.push_back(v);
    }
    values.push_back(fmt == DType::e4m3 ? 480.0f : 65536.0f);  // the first value past max
    for (size_t i = 0; i + 1 < values.size(); ++i) {
      const float mid = (values[i] + values[i + 1]) / 2;
      for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)}) {
        x.push_back(v);
        x.push_back(-v);
      }
    }
    // f32 subnormals, zeros, saturation, infinities and NaNs of both signs.
    for (float v : {std::numeric_limits<float>::denorm_min(), FLT_MIN, 0.0f, 1e-30f, 449.0f, 465.0f,
                    1e6f, FLT_MAX, kInf, kNaN, std::numeric_limits<float>::signaling_NaN()}) {
      x.push_back(v);
      x.push_back(-v);
    }
    expect_matches_reference(fmt, x, 1.0f);
    expect_matches_reference(fmt, x, 0.75f);
    expect_matches_reference(fmt, x, 3.0f);
  }
  // Spot checks of the rounding itself (e4m3 has 3 mantissa bits).
  const std::vector<float> x = {1.0625f, 1.1875f, 464.0f, 1e9f, -kInf, 0x1p-10f, 0x1.8p-10f};
  std::vector<uint16_t> q(x.size());
  quantize_fp8(DType::e4m3, x.data(), 1.0f, q.data(), static_cast<int64_t>(x.size()));
  const std::vector<float> want = {1.0f, 1.25f, 448.0f, 448.0f, -448.0f, 0.0f, 0x1p-9f};
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(bf16_to_f32(q[i]), want[i]) << x[i];
  const float nan_in[] = {kNaN, -kNaN};
  uint16_t nan_out[2];
  quantize_fp8(DType::e5m2, nan_in, 2.0f, nan_out, 2);
  EXPECT_TRUE(std::isnan(bf16_to_f32(nan_out[0])));
  EXPECT_TRUE(std::isnan(bf16_to_f32(nan_out[1])));
  EXPECT_TRUE(std::signbit(bf16_to_f32(nan_out[1])));
}

TEST(QuantizeFp8, RandomValuesMatchTheScalarRoute) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_real_distribution<float> mantissa(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-30, 20);
  // Long enough for the OpenMP path; not a multiple of the vector width.
  const size_t n = 200003;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = i % 4 == 0 ? std::bit_cast<float>(any_bits(rng))  // every class of f32, NaNs too
                      : std::ldexp(mantissa(rng), exponent(rng));
  }
  for (DType fmt : {DType::e4m3, DType::e5m2}) {
    for (float scale : {1.0f, 0.001f, 37.5f, 1.0f / 3.0f, 4096.0f}) expect_matches_reference(fmt, x, scale);
  }
}

}  // namespace
}  // namespace ndt
