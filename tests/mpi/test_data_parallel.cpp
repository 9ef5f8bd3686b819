// Data parallelism against one rank: the same losses and final parameters for the
// same seed and global batch, gradient accumulation with and without DP, no_sync
// micro-steps communicating nothing, and the bytes DDP moves against ring theory.
// Runs under mpirun with 2 and 4 ranks; each rank also runs the one-rank reference.
#include "../common/one_rank_mesh.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "comm/device_mesh.h"
#include "mpi_env.h"
#include "parallel/data/data_parallel.h"
#include "parity.h"
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ndt {
namespace {

using testing::expect_same_run;
using testing::tiny_run;
using testing::train;
using testing::TrainedRun;

class DataParallelTest : public ::testing::Test {
 protected:
  DataParallelTest() {
    write_shard(dir_.file("train.bin"), testing::synthetic_text(30000, 7));
  }
  std::string data() const { return dir_.file("train.bin"); }
  testing::TempDir dir_;
};

// Catches: DDP gradients summed instead of averaged (or off by any constant), or a rank training on the wrong rows.
TEST_F(DataParallelTest, MatchesOneRankOnTheSameGlobalBatch) {
  Communicator& world = testing::world();
  RunConfig config = tiny_run(data(), 8, 8 / world.size());
  config.grad_clip = 0;  // off: the default 1.0 clips every step of this model and hides a constant factor
  const TrainedRun reference = train(config, testing::one_rank_mesh());
  DeviceMesh mesh(world, config.resolve_mesh(world.size()));
  const TrainedRun parallel = train(config, mesh);
  expect_same_run(reference, parallel, "dp");
  EXPECT_LT(reference.losses.back(), reference.losses.front());
}

// Catches: micro-step gradients not accumulated or mis-scaled, and no_sync micro-steps that skip or double the sum.
TEST_F(DataParallelTest, AccumulationWithAndWithoutDataParallelism) {
  Communicator& world = testing::world();
  // One rank, one micro-step of the whole batch: the reference.
  const RunConfig whole = tiny_run(data(), 8 * world.size(), 8 * world.size());
  const TrainedRun reference = train(whole, testing::one_rank_mesh());
  // One rank, 4 micro-steps.
  RunConfig accumulated = whole;
  accumulated.micro_batch_size = 2 * world.size();
  expect_same_run(reference, train(accumulated, testing::one_rank_mesh()), "accumulation, one rank");
  // All ranks, 4 micro-steps each (no_sync on the first three).
  RunConfig both = whole;
  both.micro_batch_size = 2;
  DeviceMesh mesh(world, both.resolve_mesh(world.size()));
  expect_same_run(reference, train(both, mesh), "accumulation with data parallelism");
}

// Catches: buckets all-reduced on no_sync micro-steps, buckets sent twice or missed, a wrong payload per step.
TEST_F(DataParallelTest, CommunicatesRingVolumeOnlyOnTheLastMicroStep) {
  Communicator& world = testing::world();
  const int n = world.size();
  RunConfig config = tiny_run(data(), 4 * n, 1);  // 4 micro-steps per rank
  config.steps = 1;
  DeviceMesh mesh(world, config.resolve_mesh(n));
  Trainer trainer(config, mesh, nullptr);
  const CommCounter before = mesh.axis(Axis::dp).stats()[CommOp::all_reduce];
  trainer.step();
  const CommCounter after = mesh.axis(Axis::dp).stats()[CommOp::all_reduce];

  const int64_t param_bytes = trainer.model().store().numel() * 4;
  const int64_t buckets = static_cast<int64_t>(
      make_gradient_buckets(trainer.model().store(), static_cast<size_t>(config.bucket_mb * 1024 * 1024)).size());
  ASSERT_GT(buckets, 2);
  // Per step: one all-reduce per bucket (on the last micro-step only; no_sync before),
  // plus one 4-byte all-reduce averaging the loss for the log.
  EXPECT_EQ(after.calls - before.calls, buckets + 1);
  EXPECT_EQ(after.payload_bytes - before.payload_bytes, param_bytes + 4);
  // Ring all-reduce: each rank sends 2(n-1)/n of the buffer (the counters' formula,
  // which is the volume of MPI's ring algorithm; see comm/communicator.h).
  const double expected = 2.0 * (n - 1) / n * static_cast<double>(param_bytes + 4);
  EXPECT_NEAR(static_cast<double>(after.wire_bytes - before.wire_bytes), expected, static_cast<double>(buckets + 1));
}

// Catches: buckets that overlap, leave a gap, split a parameter or run in forward order (before gradients are final).
TEST(DataParallelBuckets, CoverTheArenaOnceInReverseOrder) {
  Communicator& world = testing::world();
  Transformer model(ModelConfig::preset("gpt2-tiny"), 1);
  const size_t bucket_bytes = 64 * 1024;
  DataParallel ddp(model.store(), world, bucket_bytes, AdamWConfig{}, DType::f32, world);
  const auto& buckets = ddp.buckets();
  ASSERT_GT(buckets.size(), 3u);
  EXPECT_EQ(buckets.front().end, model.store().numel());
  EXPECT_EQ(buckets.back().begin, 0);
  for (size_t b = 0; b < buckets.size(); ++b) {
    EXPECT_LT(buckets[b].begin, buckets[b].end);
    if (b + 1 < buckets.size()) {
      EXPECT_EQ(buckets[b + 1].end, buckets[b].begin);
      EXPECT_GE(static_cast<size_t>(buckets[b].end - buckets[b].begin) * 4, bucket_bytes);
    }
    bool starts_at_parameter = false;
    for (const Parameter& p : model.store().params()) starts_at_parameter |= p.arena_offset == buckets[b].begin;
    EXPECT_TRUE(starts_at_parameter) << "bucket " << b << " splits a parameter";
  }
}

}  // namespace
}  // namespace ndt
