// train.profile across ranks (train/step_profile.h): the step's profile is the rank's that
// spent the longest in kernels, the straggler the others wait for, on every rank.
#include "mpi_env.h"
#include "train/step_profile.h"

#include <gtest/gtest.h>

namespace ndt {
namespace {

StepProfile profile_of(int rank, double gemm_seconds) {
  StepProfile p;
  p.rank = rank;
  p.kernels[static_cast<size_t>(kernels::OpClass::gemm_f32)] = gemm_seconds;
  p.kernels[static_cast<size_t>(kernels::OpClass::norm)] = 0.25;
  p.communication = 1.0 + rank;
  p.rank_wait = 0.5 * rank;
  p.step_seconds = 10.0 + rank;
  return p;
}

// Catches: rank 0's profile kept (the rule before), the fastest rank's, one rank's kernels
// with another's communication or step, a tie not settled the same way on every rank, or
// the ranks ending with different profiles.
TEST(StepProfileAcrossRanks, EveryRankGetsTheProfileOfTheRankLongestInKernels) {
  Communicator& world = testing::world();
  const int n = world.size(), r = world.rank();
  // The middle rank computes longest: neither rank 0 nor the last.
  const int slowest = n / 2;
  StepProfile p = slowest_rank_profile(profile_of(r, r == slowest ? 4.0 : 2.0 + 0.25 * r), world);
  EXPECT_EQ(p.rank, slowest);
  EXPECT_EQ(p.kernels[static_cast<size_t>(kernels::OpClass::gemm_f32)], 4.0);
  EXPECT_EQ(p.kernels[static_cast<size_t>(kernels::OpClass::norm)], 0.25);
  EXPECT_EQ(p.communication, 1.0 + slowest);
  EXPECT_EQ(p.rank_wait, 0.5 * slowest);
  EXPECT_EQ(p.step_seconds, 10.0 + slowest);
  // A tie: the lowest of the tied ranks, on every rank.
  p = slowest_rank_profile(profile_of(r, r == 0 ? 1.0 : 3.0), world);
  EXPECT_EQ(p.rank, n > 1 ? 1 : 0);
  EXPECT_EQ(p.step_seconds, 10.0 + p.rank);
}

}  // namespace
}  // namespace ndt
