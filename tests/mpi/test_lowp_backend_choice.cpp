// The bf16 GEMM backend each rank chooses at run time (kernels/cpu/gemm_lowp.h): ranks
// that share cores must choose alike, since what a rank does around its matmuls can hang
// on it (the calibration's barriers did, when each rank timed the two instructions by the
// wall clock and some read the dot product as the faster).
#include "kernels/cpu/gemm_lowp.h"
#include "kernels/cpu/instruction_rate.h"
#include "mpi_env.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace ndt {
namespace {

// Catches: a rate measured by the wall clock on ranks that share cores (a rank descheduled
// during one loop and not the other reads any ratio), whose ranks then choose apart.
TEST(LowpBackendChoice, RanksSharingCoresMeasureTheSameSideOfTheThreshold) {
  Communicator& world = testing::world();
  if (!cpu::has_bf16_dot_product()) GTEST_SKIP() << "this CPU has no AVX512-BF16 dot product";
  constexpr int kTrials = 5;
  std::vector<float> mine;
  for (int t = 0; t < kTrials; ++t) mine.push_back(static_cast<float>(cpu::bf16_dot_over_fma_rate()));
  std::vector<float> all(mine.size() * static_cast<size_t>(world.size()));
  world.all_gather(mine.data(), all.data(), mine.size(), DType::f32);
  const auto [low, high] = std::minmax_element(all.begin(), all.end());
  EXPECT_EQ(*low >= 1.0f, *high >= 1.0f) << "ratios from " << *low << " to " << *high << " on " << world.size()
                                         << " ranks: they would choose different backends";
  // Far from the threshold on every CPU known: 0.39-0.60 on a Xeon without AMX, 2 ranks on
  // its 2 cores (the cores' hyperthread siblings or neighbours move it); wider is the timing.
  EXPECT_LT(*high / *low, 2.5f) << "ratios from " << *low << " to " << *high;
  const float backend = cpu::active_lowp_gemm_backend(DType::bf16) == cpu::LowpGemmBackend::onednn ? 1.0f : 0.0f;
  std::vector<float> backends(static_cast<size_t>(world.size()));
  world.all_gather(&backend, backends.data(), 1, DType::f32);
  for (float b : backends) EXPECT_EQ(b, backend) << "the ranks run bf16 matmuls on different backends";
}

}  // namespace
}  // namespace ndt
