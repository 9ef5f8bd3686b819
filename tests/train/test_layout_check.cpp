// parallel.layout = "auto"'s check of the predicted step time (train/layout_check.h): the
// median of the steps after the first, once, at the step that completes it or at a
// shorter run's last step.
#include "train/layout_check.h"

#include <gtest/gtest.h>

namespace ndt {
namespace {

LayoutPrediction predicted(double step_s) {
  LayoutPrediction p;
  p.layout = "dp_replicate2 | ddp | mb2 | none";
  p.step_s = step_s;
  return p;
}

// Catches: the first (warm-up) step counted, a mean instead of the median, or the check
// reported twice or never.
TEST(LayoutCheck, MedianOfTheStepsAfterTheFirstOnce) {
  LayoutCheck check(predicted(0.1), 3);
  EXPECT_FALSE(check.observe(0, 9.0, false));  // the first step: page faults, left out
  EXPECT_FALSE(check.observe(1, 0.12, false));
  EXPECT_FALSE(check.observe(2, 0.5, false));
  const std::optional<LayoutCheckResult> r = check.observe(3, 0.11, false);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->steps, 3);
  EXPECT_DOUBLE_EQ(r->measured_step_s, 0.12);
  EXPECT_NEAR(r->error(), 0.2, 1e-12);
  EXPECT_EQ(r->describe(4), "layout check after step 4: dp_replicate2 | ddp | mb2 | none measured 0.12 s per step "
                            "(median of 3) against 0.1 s predicted (+20.0%)");
  EXPECT_FALSE(check.observe(4, 0.11, true));
}

// Catches: a run shorter than the check never reporting, or a one-step run reporting nothing.
TEST(LayoutCheck, AShorterRunChecksAtItsLastStep) {
  LayoutCheck short_run(predicted(0.1), 5);
  EXPECT_FALSE(short_run.observe(0, 1.0, false));
  const std::optional<LayoutCheckResult> r = short_run.observe(1, 0.08, true);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->steps, 1);
  EXPECT_DOUBLE_EQ(r->measured_step_s, 0.08);
  LayoutCheck one_step(predicted(0.1), 5);
  const std::optional<LayoutCheckResult> only = one_step.observe(0, 0.3, true);
  ASSERT_TRUE(only);
  EXPECT_DOUBLE_EQ(only->measured_step_s, 0.3);
}

}  // namespace
}  // namespace ndt
