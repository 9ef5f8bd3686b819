// The spike detector alone: both conditions (z-score and relative increase) are needed,
// nothing is called before min_samples, the window slides, and its state round-trips.
#include "train/spike_detector.h"

#include "core/error.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ndt {
namespace {

SpikeDetectorConfig config(int window, int min_samples, double zscore, double min_increase) {
  SpikeDetectorConfig c;
  c.window = window, c.min_samples = min_samples, c.zscore = zscore, c.min_increase = min_increase;
  return c;
}

TEST(SpikeDetector, NeedsBothTheZScoreAndTheIncrease) {
  SpikeDetector d(config(8, 4, 3.0, 0.25));
  for (double loss : {3.0, 3.1, 2.9, 3.0}) d.record(loss, 1.0);
  // mean 3.0, population std 0.0707: 3 std above is 3.21, 25% above is 3.75.
  EXPECT_EQ(d.check(3.5, 1.0), "") << "z-score 7 but only 17% over the mean";
  EXPECT_NE(d.check(3.8, 1.0), "");
  EXPECT_NE(d.check(3.8, 1.0).find("loss 3.8 is above the last 4 steps' mean 3"), std::string::npos)
      << d.check(3.8, 1.0);
  // A noisy window: 30% over the mean but within 3 standard deviations.
  SpikeDetector noisy(config(8, 4, 3.0, 0.25));
  for (double loss : {2.0, 4.0, 2.0, 4.0}) noisy.record(loss, 1.0);
  EXPECT_EQ(noisy.check(3.9, 1.0), "");
  // The gradient norm is checked the same way.
  EXPECT_NE(d.check(3.0, 5.0).find("gradient norm 5 is above"), std::string::npos) << d.check(3.0, 5.0);
}

TEST(SpikeDetector, SilentBeforeMinSamplesAndTheWindowSlides) {
  SpikeDetector d(config(4, 3, 2.0, 0.1));
  d.record(1.0, 1.0);
  d.record(1.0, 1.0);
  EXPECT_EQ(d.check(100.0, 1.0), "") << "two samples of the three needed";
  d.record(1.0, 1.0);
  EXPECT_NE(d.check(100.0, 1.0), "");
  // Four larger values push the ones out: 5 is then the normal level.
  for (int i = 0; i < 4; ++i) d.record(5.0 + 0.01 * i, 1.0);
  EXPECT_EQ(d.check(5.0, 1.0), "");
  EXPECT_EQ(d.state().size(), 8u) << "4 (loss, norm) pairs";
}

TEST(SpikeDetector, StateRoundTripsAndBadValuesAreRefused) {
  SpikeDetector a(config(8, 2, 3.0, 0.25)), b(config(8, 2, 3.0, 0.25));
  for (int i = 0; i < 5; ++i) a.record(3.0 + 0.1 * i, 1.0 + 0.01 * i);
  b.restore(a.state());
  EXPECT_EQ(b.state(), a.state());
  EXPECT_EQ(b.check(9.0, 1.0), a.check(9.0, 1.0));
  EXPECT_THROW(b.restore(std::vector<double>(3, 1.0)), Error);
  EXPECT_THROW(b.restore(std::vector<double>(18, 1.0)), Error);
  EXPECT_THROW(SpikeDetector(config(1, 1, 3.0, 0.25)), Error);
}

}  // namespace
}  // namespace ndt
