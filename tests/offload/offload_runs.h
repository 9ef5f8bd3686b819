// Shared by the offload tests: a small one-rank run, the offload settings on top of it,
// and the bitwise comparison of two trained runs (mpi/parity.h's TrainedRun).
#pragma once

#include "../common/one_rank_mesh.h"
#include "../mpi/parity.h"
#include "../train/test_support.h"
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ndt::testing {

// small_run with ZeRO `stage` and, when optimizer (params) is set, its moments (and
// parameter shards) in swap files under swap_dir, in chunks of 16 KiB so every unit
// spans several chunks and some end mid-chunk.
inline RunConfig offload_run(const std::string& train, int stage, bool optimizer, bool params,
                             const std::string& swap_dir) {
  RunConfig c = small_run(train, 20);
  c.zero_stage = stage;
  c.offload_optimizer = optimizer;
  c.offload_params = params;
  c.offload_dir = swap_dir;
  c.offload_chunk_mb = 16.0 / 1024;
  return c;
}

// Every loss, gradient norm and final parameter equal, bit for bit.
inline void expect_bitwise(const TrainedRun& reference, const TrainedRun& run, const std::string& what) {
  ASSERT_EQ(run.losses.size(), reference.losses.size());
  for (size_t s = 0; s < reference.losses.size(); ++s) {
    EXPECT_EQ(run.losses[s], reference.losses[s]) << what << ": loss of step " << s + 1;
    EXPECT_EQ(run.grad_norms[s], reference.grad_norms[s]) << what << ": gradient norm of step " << s + 1;
  }
  ASSERT_EQ(run.params.size(), reference.params.size());
  size_t differ = 0;
  for (size_t i = 0; i < reference.params.size(); ++i) differ += run.params[i] != reference.params[i];
  EXPECT_EQ(differ, 0u) << what << ": parameters that differ after " << reference.losses.size() << " steps";
}

}  // namespace ndt::testing
