// Dynamic loss scaling: backoff and skip on overflow, growth after exactly
// growth_interval clean steps, clamping, checkpoint state, config validation, and the
// non-finite gradient check.
#include "core/error.h"
#include "optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace ndt {
namespace {

LossScalerConfig small_config() {
  LossScalerConfig c;
  c.initial_scale = 1024;
  c.growth_interval = 3;
  c.min_scale = 256;
  c.max_scale = 4096;
  return c;
}

void expect_error(const LossScalerConfig& c, const std::string& text) {
  try {
    c.validate();
    FAIL() << "no error, expected: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(LossScaler, DefaultsAreValid) {
  LossScalerConfig c;
  c.validate();
  DynamicLossScaler s(c);
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.clean_steps(), 0);
  EXPECT_EQ(s.skipped_steps(), 0);
}

TEST(LossScaler, OverflowHalvesAndSkips) {
  DynamicLossScaler s(small_config());
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_EQ(s.clean_steps(), 0);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 256.0f);
  EXPECT_EQ(s.skipped_steps(), 2);
}

TEST(LossScaler, GrowsAfterExactlyIntervalCleanSteps) {
  DynamicLossScaler s(small_config());
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.clean_steps(), 2);
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_TRUE(s.update(false));  // the third clean step in a row
  EXPECT_EQ(s.scale(), 2048.0f);
  EXPECT_EQ(s.clean_steps(), 0);
  EXPECT_EQ(s.skipped_steps(), 0);
}

TEST(LossScaler, OverflowInTheMiddleResetsTheCount) {
  DynamicLossScaler s(small_config());
  s.update(false);
  s.update(false);
  EXPECT_FALSE(s.update(true));  // 1024 -> 512, count back to 0
  EXPECT_EQ(s.clean_steps(), 0);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 512.0f);  // only two clean steps since the overflow
  s.update(false);
  EXPECT_EQ(s.scale(), 1024.0f);
}

TEST(LossScaler, ClampsAtMinAndMax) {
  DynamicLossScaler s(small_config());
  for (int i = 0; i < 5; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 256.0f);  // min_scale
  EXPECT_EQ(s.skipped_steps(), 5);
  for (int i = 0; i < 30; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 4096.0f);  // max_scale
  // A factor that overshoots the bound lands on it.
  LossScalerConfig c = small_config();
  c.initial_scale = 300;
  c.growth_factor = 10;
  c.backoff_factor = 0.1;
  DynamicLossScaler t(c);
  t.update(true);
  EXPECT_EQ(t.scale(), 256.0f);
  for (int i = 0; i < 3; ++i) t.update(false);
  EXPECT_EQ(t.scale(), 2560.0f);
  for (int i = 0; i < 3; ++i) t.update(false);
  EXPECT_EQ(t.scale(), 4096.0f);
}

TEST(LossScaler, StateRoundTrip) {
  DynamicLossScaler s(small_config());
  s.update(true);
  s.update(false);
  s.update(false);
  const LossScalerState st = s.state();
  EXPECT_EQ(st.scale, 512.0);
  EXPECT_EQ(st.clean_steps, 2);
  EXPECT_EQ(st.skipped, 1);
  DynamicLossScaler r(small_config());
  r.restore(st);
  EXPECT_EQ(r.scale(), 512.0f);
  EXPECT_EQ(r.clean_steps(), 2);
  EXPECT_EQ(r.skipped_steps(), 1);
  // Both continue identically: the next clean step grows.
  EXPECT_TRUE(r.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(r.scale(), 1024.0f);
  EXPECT_EQ(r.scale(), s.scale());
}

TEST(LossScaler, RestoreRejectsStatesOutsideTheConfig) {
  DynamicLossScaler s(small_config());
  auto expect_restore_error = [&](LossScalerState st, const std::string& text) {
    try {
      s.restore(st);
      FAIL() << "no error, expected: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  expect_restore_error({8192, 0, 0}, "loss scale 8192");
  expect_restore_error({128, 0, 0}, "loss scale 128");
  expect_restore_error({std::nan(""), 0, 0}, "loss scale nan");
  expect_restore_error({std::numeric_limits<double>::infinity(), 0, 0}, "loss scale inf");
  expect_restore_error({512, 3, 0}, "clean-step count 3");
  expect_restore_error({512, -1, 0}, "clean-step count -1");
  expect_restore_error({512, 0, -2}, "skipped-step count -2");
  EXPECT_EQ(s.scale(), 1024.0f);  // a rejected state changes nothing
}

TEST(LossScaler, InvalidConfigErrorsNameTheKeyAndValue) {
  LossScalerConfig c;
  c.growth_factor = 1;
  expect_error(c, "precision.loss_scale.growth_factor = 1");
  c = {};
  c.backoff_factor = 1.5;
  expect_error(c, "precision.loss_scale.backoff_factor = 1.5");
  c = {};
  c.backoff_factor = 0;
  expect_error(c, "precision.loss_scale.backoff_factor = 0");
  c = {};
  c.growth_interval = 0;
  expect_error(c, "precision.loss_scale.growth_interval = 0");
  c = {};
  c.min_scale = -1;
  expect_error(c, "precision.loss_scale.min_scale = -1");
  c = {};
  c.max_scale = std::numeric_limits<double>::infinity();
  expect_error(c, "precision.loss_scale.max_scale = inf");
  c = {};
  c.min_scale = 8;
  c.max_scale = 4;
  expect_error(c, "precision.loss_scale.max_scale = 4");
  c = {};
  c.initial_scale = 1e9;
  expect_error(c, "precision.loss_scale.initial_scale = 1000000000");
  c = {};
  c.initial_scale = std::nan("");
  expect_error(c, "precision.loss_scale.initial_scale = nan");
  c = small_config();
  c.growth_interval = -3;
  EXPECT_THROW(DynamicLossScaler{c}, Error);
}

TEST(AnyNonFinite, FindsNanAndInfAnywhere) {
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::signaling_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  // Small (one thread, vector tail) and large (OpenMP) lengths, none a multiple of 16.
  for (int64_t n : {1, 7, 37, 100003}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[i] = (i % 2 ? -1.0f : 1.0f) * std::ldexp(1.5f, static_cast<int>(i % 250) - 125);
    x[0] = std::numeric_limits<float>::max();  // huge, tiny and subnormal values are finite
    if (n > 1) x[1] = std::numeric_limits<float>::denorm_min();
    EXPECT_FALSE(any_non_finite(x.data(), n)) << n;
    for (int64_t pos : {int64_t{0}, n / 2, n - 1}) {
      for (float bad : specials) {
        const float keep = x[pos];
        x[pos] = bad;
        EXPECT_TRUE(any_non_finite(x.data(), n)) << "n " << n << " position " << pos << " value " << bad;
        x[pos] = keep;
      }
    }
  }
  EXPECT_FALSE(any_non_finite(nullptr, 0));
}

}  // namespace
}  // namespace ndt
