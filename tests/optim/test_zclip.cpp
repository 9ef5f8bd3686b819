// ZClip: decisions, targets, z-scores and EMA statistics against an independent
// long-double reference on a recorded norm sequence with two spikes; warm-up; checkpoint
// state round trips (bit-identical continuation) and malformed states; config and norm
// validation; a constant run of norms (variance 0).
#include "../common/errors.h"
#include "core/error.h"
#include "optim/zclip.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace ndt {
namespace {

constexpr int kSpikeA = 32;
constexpr int kSpikeB = 47;
constexpr int kBumpA = 40;
constexpr int kBumpB = 54;

// 60 norms: a smooth decay with small deterministic noise, plus, after the 25-step
// warm-up, two spikes (10x the smooth value: clipped) and two bumps (2.5x: z about 1.7
// and 1.5, below the threshold since the warm-up's decay makes the std large).
std::vector<double> recorded_norms() {
  std::vector<double> x(60);
  for (int i = 0; i < 60; ++i) {
    x[i] = 1.0 + 2.0 * std::exp(-i / 15.0) + 0.04 * std::sin(2.3 * i + 0.7);
  }
  x[kSpikeA] *= 10;
  x[kSpikeB] *= 10;
  x[kBumpA] *= 2.5;
  x[kBumpB] *= 2.5;
  return x;
}

// The formulas of zclip.h, written out independently in long double: the warm-up
// statistics two-pass over the collected norms, the EMA in the literal form
// mean' = alpha * mean + (1 - alpha) * c, var' = alpha * var + (1 - alpha) * (c - mean')^2.
struct RefStep {
  bool clipped;
  long double target, z, mean, var;  // mean and var after this step
};

std::vector<RefStep> reference(const std::vector<double>& norms, const ZClipConfig& c) {
  std::vector<RefStep> out;
  const long double alpha = c.alpha, thr = c.threshold, eps = c.eps;
  long double mean = 0, var = 0;
  for (size_t i = 0; i < norms.size(); ++i) {
    const long double x = norms[i];
    if (static_cast<int>(i) < c.warmup_steps) {
      const size_t n = i + 1;
      long double sum = 0;
      for (size_t j = 0; j < n; ++j) sum += norms[j];
      mean = sum / n;
      long double ss = 0;
      for (size_t j = 0; j < n; ++j) ss += (norms[j] - mean) * (norms[j] - mean);
      var = ss / n;
      out.push_back({false, x, 0, mean, var});
      continue;
    }
    const long double sd = std::sqrt(var);
    const long double z = (x - mean) / (sd + eps);
    const bool clipped = z > thr;
    const long double target = clipped ? mean + thr * sd : x;
    mean = alpha * mean + (1 - alpha) * target;
    var = alpha * var + (1 - alpha) * (target - mean) * (target - mean);
    out.push_back({clipped, target, z, mean, var});
  }
  return out;
}

// |actual - ref| <= 1e-12 * max(|ref|, floor).
::testing::AssertionResult near(double actual, long double ref, long double floor = 0) {
  const long double tol = 1e-12L * std::max(std::fabs(ref), floor);
  if (std::fabs(actual - ref) <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << actual << " vs reference " << static_cast<double>(ref)
                                       << " (difference " << static_cast<double>(actual - ref)
                                       << ", tolerance " << static_cast<double>(tol) << ")";
}

template <typename F>
void expect_error(F f, const std::string& text) {
  testing::expect_error(f, {text});
}

bool same(const ZClip::Decision& a, const ZClip::Decision& b) {
  return a.clipped == b.clipped && a.norm == b.norm && a.target == b.target && a.z == b.z;
}

TEST(ZClip, RecordedSequenceMatchesTheReference) {
  const ZClipConfig config;  // alpha 0.97, threshold 2.5, warm-up 25, eps 1e-6
  const std::vector<double> norms = recorded_norms();
  const std::vector<RefStep> ref = reference(norms, config);

  // The sequence is a meaningful test: the reference clips exactly the two spikes, the
  // bumps come within a z-score of 1.5 of the threshold, and no z-score after warm-up is
  // within 0.5 of it (so rounding cannot flip a decision).
  for (int i = config.warmup_steps; i < 60; ++i) {
    const bool spike = i == kSpikeA || i == kSpikeB;
    EXPECT_EQ(ref[i].clipped, spike) << i;
    if (spike) {
      EXPECT_GT(ref[i].z, config.threshold + 5) << i;
    } else {
      EXPECT_LT(ref[i].z, config.threshold - 0.5) << i;
    }
    if (i == kBumpA || i == kBumpB) {
      EXPECT_GT(ref[i].z, 1) << i;
    }
  }

  ZClip zc(config);
  for (int i = 0; i < 60; ++i) {
    const double mean_before = zc.mean();
    const double sd_before = std::sqrt(zc.variance());
    const ZClip::Decision d = zc.update(norms[i]);
    SCOPED_TRACE("step " + std::to_string(i));
    EXPECT_EQ(d.clipped, ref[i].clipped);
    EXPECT_EQ(d.norm, norms[i]);
    EXPECT_TRUE(near(d.target, ref[i].target));
    EXPECT_TRUE(near(d.z, ref[i].z, 1));  // z is dimensionless: an absolute floor of 1e-12
    EXPECT_TRUE(near(zc.mean(), ref[i].mean));
    EXPECT_TRUE(near(zc.variance(), ref[i].var));
    EXPECT_EQ(zc.steps_seen(), i + 1);
    EXPECT_EQ(zc.warmed_up(), i + 1 >= config.warmup_steps);
    if (d.clipped) {
      // Clipped to mean + threshold * std of the statistics before this step (to the
      // last rounding: the compiler may fuse the multiply-add).
      EXPECT_DOUBLE_EQ(d.target, mean_before + config.threshold * sd_before);
      EXPECT_LT(d.target, d.norm);
    } else {
      EXPECT_EQ(d.target, d.norm);
    }
    if (i < config.warmup_steps) {
      EXPECT_EQ(d.z, 0.0);
    }
  }
}

TEST(ZClip, NoClippingDuringWarmupAndPopulationStatisticsAfter) {
  ZClipConfig config;
  config.warmup_steps = 10;
  const std::vector<double> norms = {3.0, 2.5, 2.75, 1e6, 2.0, 2.2, 1e9, 1.9, 1.8, 1e12};
  ZClip zc(config);
  for (size_t i = 0; i < norms.size(); ++i) {
    EXPECT_FALSE(zc.warmed_up()) << i;
    const ZClip::Decision d = zc.update(norms[i]);
    EXPECT_FALSE(d.clipped) << i;
    EXPECT_EQ(d.target, norms[i]) << i;
    EXPECT_EQ(d.z, 0.0) << i;
  }
  EXPECT_TRUE(zc.warmed_up());
  EXPECT_EQ(zc.steps_seen(), 10);
  long double sum = 0;
  for (double x : norms) sum += x;
  const long double mean = sum / 10;
  long double ss = 0;
  for (double x : norms) ss += (x - mean) * (x - mean);
  EXPECT_TRUE(near(zc.mean(), mean));
  EXPECT_TRUE(near(zc.variance(), ss / 10));  // population variance: divided by n, not n - 1

  // With a one-step warm-up the first norm is the mean and the variance is 0.
  config.warmup_steps = 1;
  ZClip one(config);
  EXPECT_FALSE(one.update(4.0).clipped);
  EXPECT_TRUE(one.warmed_up());
  EXPECT_EQ(one.mean(), 4.0);
  EXPECT_EQ(one.variance(), 0.0);
}

TEST(ZClip, AZScoreExactlyAtTheThresholdIsNotClipped) {
  // Warm-up 0, 2: mean 1, variance 1. With eps a power of two every step below is exact,
  // so z = (x - 1) / (1 + eps) is exactly the threshold for x = 1 + threshold * (1 + eps).
  ZClipConfig config;
  config.warmup_steps = 2;
  config.eps = std::ldexp(1.0, -20);
  const double at = 1 + config.threshold * (1 + config.eps);
  ZClip zc(config);
  zc.update(0);
  zc.update(2);
  ASSERT_EQ(zc.mean(), 1.0);
  ASSERT_EQ(zc.variance(), 1.0);
  const std::vector<double> st = zc.state();
  const ZClip::Decision d = zc.update(at);
  EXPECT_EQ(d.z, config.threshold);
  EXPECT_FALSE(d.clipped);  // clipped only when z > threshold
  EXPECT_EQ(d.target, at);
  ZClip above(config);
  above.restore(st);
  const ZClip::Decision e = above.update(std::nextafter(at, 10.0));
  EXPECT_GT(e.z, config.threshold);
  EXPECT_TRUE(e.clipped);
  EXPECT_EQ(e.target, 1 + config.threshold);  // mean + threshold * std = 1 + 2.5 * 1
}

TEST(ZClip, SaveRestoreContinuesBitIdentically) {
  const ZClipConfig config;
  const std::vector<double> norms = recorded_norms();
  ZClip whole(config);
  std::vector<ZClip::Decision> expected;
  for (double x : norms) expected.push_back(whole.update(x));

  // Cut before anything, mid warm-up, at its last step, right after it, after a spike.
  for (int cut : {0, 1, 10, 24, 25, 26, kSpikeA + 1, 40, 59}) {
    SCOPED_TRACE("cut after " + std::to_string(cut) + " norms");
    ZClip first(config);
    for (int i = 0; i < cut; ++i) first.update(norms[i]);
    const std::vector<double> st = first.state();
    ASSERT_EQ(st.size(), static_cast<size_t>(ZClip::kStateSize));
    EXPECT_EQ(st[0], cut);
    EXPECT_EQ(st[1], cut >= config.warmup_steps ? 1.0 : 0.0);

    ZClip resumed(config);
    resumed.restore(st);
    EXPECT_EQ(resumed.steps_seen(), cut);
    EXPECT_EQ(resumed.warmed_up(), first.warmed_up());
    EXPECT_EQ(resumed.mean(), first.mean());
    EXPECT_EQ(resumed.variance(), first.variance());
    for (int i = cut; i < 60; ++i) {
      const ZClip::Decision d = resumed.update(norms[i]);
      EXPECT_TRUE(same(d, expected[i])) << "step " << i;
    }
    EXPECT_EQ(resumed.state(), whole.state());
  }
}

TEST(ZClip, RestoreRefusesMalformedState) {
  const ZClipConfig config;  // warm-up 25
  ZClip zc(config);
  for (int i = 0; i < 30; ++i) zc.update(1.0 + 0.01 * i);
  const std::vector<double> before = zc.state();
  const double inf = std::numeric_limits<double>::infinity();
  auto expect_restore_error = [&](const std::vector<double>& st, const std::string& text) {
    expect_error([&] { zc.restore(st); }, text);
  };
  expect_restore_error({}, "has 0 numbers, expected 4");
  expect_restore_error({30, 1, 1.0}, "has 3 numbers, expected 4");
  expect_restore_error({30, 1, 1.0, 0.1, 0}, "has 5 numbers, expected 4");
  expect_restore_error({30, 1, std::nan(""), 0.1}, "number 2 is nan");
  expect_restore_error({30, 1, 1.0, inf}, "number 3 is inf");
  expect_restore_error({-1, 1, 1.0, 0.1}, "step count -1");
  expect_restore_error({2.5, 0, 1.0, 0.1}, "step count 2.5");
  expect_restore_error({3e9, 1, 1.0, 0.1}, "step count 3000000000");
  expect_restore_error({30, 2, 1.0, 0.1}, "warmed-up flag 2");
  expect_restore_error({30, 0.5, 1.0, 0.1}, "warmed-up flag 0.5");
  expect_restore_error({30, 1, -1.0, 0.1}, "mean -1");
  expect_restore_error({30, 1, 1.0, -0.1}, "variance -0.1");
  expect_restore_error({10, 0, 1.0, -0.1}, "sum of squared deviations -0.1");
  expect_restore_error({25, 0, 1.0, 0.1},
                       "in warm-up with 25 norms seen, but optim.zclip_warmup = 25");
  expect_restore_error({0, 0, 1.0, 0}, "no norms seen but mean 1");
  expect_restore_error({0, 1, 1.0, 0.1}, "past warm-up with no norms seen");
  EXPECT_EQ(zc.state(), before);  // a refused state changes nothing

  // The empty state and a state from a longer warm-up that is already past it are fine.
  ZClip fresh(config);
  fresh.restore({0, 0, 0, 0});
  EXPECT_EQ(fresh.steps_seen(), 0);
  fresh.restore({5, 1, 2.0, 0.25});
  EXPECT_TRUE(fresh.warmed_up());
  EXPECT_EQ(fresh.variance(), 0.25);
}

TEST(ZClipConfig, InvalidValuesNameTheKeyAndValue) {
  ZClipConfig{}.validate();
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  struct Case {
    double alpha = 0.97, threshold = 2.5;
    int warmup = 25;
    double eps = 1e-6;
    const char* text;
  };
  const Case cases[] = {
      {.alpha = 0, .text = "optim.zclip_alpha = 0"},
      {.alpha = 1, .text = "optim.zclip_alpha = 1"},
      {.alpha = 1.5, .text = "optim.zclip_alpha = 1.5"},
      {.alpha = nan, .text = "optim.zclip_alpha = nan"},
      {.threshold = 0, .text = "optim.zclip_threshold = 0"},
      {.threshold = -2, .text = "optim.zclip_threshold = -2"},
      {.threshold = inf, .text = "optim.zclip_threshold = inf"},
      {.warmup = 0, .text = "optim.zclip_warmup = 0"},
      {.warmup = -4, .text = "optim.zclip_warmup = -4"},
      {.eps = 0, .text = "optim.zclip_eps = 0"},
      {.eps = nan, .text = "optim.zclip_eps = nan"},
  };
  for (const Case& k : cases) {
    const ZClipConfig bad{k.alpha, k.threshold, k.warmup, k.eps};
    expect_error([&] { bad.validate(); }, k.text);
    expect_error([&] { ZClip z(bad); }, k.text);  // the constructor validates
  }
}

TEST(ZClip, NonFiniteOrNegativeNormRefused) {
  ZClip zc(ZClipConfig{});
  for (int i = 0; i < 30; ++i) zc.update(2.0 - 0.01 * i);
  const std::vector<double> before = zc.state();
  expect_error([&] { zc.update(std::nan("")); }, "gradient norm nan must be finite");
  expect_error([&] { zc.update(std::numeric_limits<double>::infinity()); }, "gradient norm inf");
  expect_error([&] { zc.update(-1.0); }, "gradient norm -1");
  EXPECT_EQ(zc.state(), before);  // a refused norm changes nothing

  ZClip cold(ZClipConfig{});  // refused during warm-up too
  expect_error([&] { cold.update(std::nan("")); }, "gradient norm nan");
  EXPECT_EQ(cold.steps_seen(), 0);
}

TEST(ZClip, ConstantNormsHaveZeroVarianceAndALargerNormIsClipped) {
  const ZClipConfig config;
  ZClip zc(config);
  for (int i = 0; i < 60; ++i) {
    const ZClip::Decision d = zc.update(0.1);
    EXPECT_FALSE(d.clipped) << i;
    EXPECT_EQ(d.target, 0.1) << i;
    EXPECT_EQ(d.z, 0.0) << i;  // 0 / (0 + eps), not 0 / 0
  }
  EXPECT_EQ(zc.mean(), 0.1);
  EXPECT_EQ(zc.variance(), 0.0);

  // std is 0, so any larger norm has z = (x - mean) / eps, far above the threshold, and
  // is clipped to mean + threshold * 0 = the mean; the kept value leaves the statistics
  // as they were.
  const ZClip::Decision d = zc.update(0.1001);
  EXPECT_TRUE(d.clipped);
  EXPECT_TRUE(std::isfinite(d.z));
  EXPECT_NEAR(d.z, 1e-4 / 1e-6, 1e-6);
  EXPECT_EQ(d.target, 0.1);
  EXPECT_EQ(zc.mean(), 0.1);
  EXPECT_EQ(zc.variance(), 0.0);
  // A smaller norm is never clipped (z < 0).
  const ZClip::Decision lower = zc.update(0.05);
  EXPECT_FALSE(lower.clipped);
  EXPECT_LT(lower.z, 0);
  EXPECT_EQ(lower.target, 0.05);
}

}  // namespace
}  // namespace ndt
