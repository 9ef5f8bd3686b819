// The MFU peak of a run (train/peak_flops.h): measured by all ranks at once and averaged,
// so every rank of a run, and the planner's validation that reads rank 0's, holds the same
// figure; a configured peak is taken as given.
#include "mpi_env.h"
#include "train/peak_flops.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ndt {
namespace {

std::vector<float> gathered(Communicator& world, double value) {
  const float mine = static_cast<float>(value);
  std::vector<float> all(world.size());
  world.all_gather(&mine, all.data(), 1, DType::f32);
  return all;
}

// Catches: each rank keeping its own measurement (ranks sharing cores measure different
// shares of them when they do not measure together).
TEST(RunPeakFlops, EveryRankHoldsTheSameMeasuredFigure) {
  Communicator& world = testing::world();
  const PeakFlops peak = resolve_run_peak_flops(0, 1, DType::f32, world);
  EXPECT_GT(peak.flops_per_s, 1e8);
  for (float v : gathered(world, peak.flops_per_s)) EXPECT_EQ(v, static_cast<float>(peak.flops_per_s));
  if (world.size() > 1) {
    EXPECT_NE(peak.source.find("the mean of"), std::string::npos) << peak.source;
  }
}

// Catches: a configured peak replaced by a measurement or averaged.
TEST(RunPeakFlops, ConfiguredPeakIsTakenAsGiven) {
  Communicator& world = testing::world();
  const PeakFlops peak = resolve_run_peak_flops(123, 1, DType::f32, world);
  EXPECT_EQ(peak.flops_per_s, 123e9);
  EXPECT_EQ(peak.source, "config runtime.peak_gflops");
}

}  // namespace
}  // namespace ndt
