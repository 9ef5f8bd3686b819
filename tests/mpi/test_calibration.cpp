// The calibration's figures across ranks (plan/calibration.h): every rank ends with the
// slowest rank's rate of each figure, because ranks that synchronise run at its pace.
#include "mpi_env.h"
#include "plan/calibration.h"

#include <gtest/gtest.h>

#include <vector>

namespace ndt {
namespace {

// Catches: the ranks' mean (the calibration's rule before), the fastest rank's, or each
// rank keeping its own.
TEST(CalibrationAcrossRanks, EveryRankKeepsTheSlowestRanksRateOfEachFigure) {
  Communicator& world = testing::world();
  const int n = world.size(), r = world.rank();
  // Figure 0 is slowest on the last rank, figure 1 on rank 0, figure 2 the same everywhere.
  std::vector<float> rates = {100.0f - r, 50.0f + 2.0f * r, 7.5f};
  keep_slowest_rank(world, rates);
  EXPECT_EQ(rates[0], 100.0f - (n - 1));
  EXPECT_EQ(rates[1], 50.0f);
  EXPECT_EQ(rates[2], 7.5f);
}

}  // namespace
}  // namespace ndt
