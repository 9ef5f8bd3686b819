// MFU against the peak sampled beside each step (train/peak_flops.h, `bench train
// --peak-each-step`).
#include "train/peak_flops.h"

#include "../common/errors.h"
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ndt {
namespace {

// Catches: a step set against one sample instead of the two beside it, or samples paired
// with the wrong step.
TEST(MfuBesideSteps, EachStepAgainstTheMeanOfTheSamplesOnItsTwoSides) {
  // 100 FLOPs a step; steps of 1 s and 0.5 s; samples 100, 300, 100 FLOP/s.
  const std::vector<double> mfu = mfu_beside_steps(100, {1.0, 0.5}, {100, 300, 100});
  ASSERT_EQ(mfu.size(), 2u);
  EXPECT_DOUBLE_EQ(mfu[0], 100.0 / 1.0 / 200);
  EXPECT_DOUBLE_EQ(mfu[1], 100.0 / 0.5 / 200);
  EXPECT_DOUBLE_EQ(mfu_beside_steps(100, {2.0}, {25, 75})[0], 1.0);
}

// Catches: samples that do not bracket every step accepted (an index past the end), or a
// zero sample dividing.
TEST(MfuBesideSteps, RefusesSamplesThatDoNotBracketTheSteps) {
  testing::expect_error([] { mfu_beside_steps(100, {1.0, 1.0}, {100, 100}); },
                        {"2 steps need 3 peak samples around them, got 2"});
  testing::expect_error([] { mfu_beside_steps(100, {1.0}, {100, 0}); },
                        {"step 1: its seconds (1) and the peak samples beside it (100, 0) must be positive"});
}

// Catches: a sample that is not a rate of this machine (zero, or not finite).
TEST(SamplePeakRate, IsAPositiveRateInEachDtype) {
  for (DType compute : {DType::f32, DType::bf16}) {
    const double rate = sample_peak_rate(1, compute, nullptr);
    EXPECT_GT(rate, 1e8) << dtype_name(compute);  // above 0.1 GFLOP/s on any CPU we meet
    EXPECT_TRUE(std::isfinite(rate));
  }
}

}  // namespace
}  // namespace ndt
