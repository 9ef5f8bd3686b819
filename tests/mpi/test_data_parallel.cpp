// Data parallelism against one rank: the same losses and final parameters for the
// same seed and global batch, gradient accumulation with and without DP, no_sync
// micro-steps communicating nothing, and the bytes DDP moves against ring theory.
// Runs under mpirun with 2 and 4 ranks; each rank also runs the one-rank reference.
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "comm/device_mesh.h"
#include "mpi_env.h"
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ndt {
namespace {

RunConfig tiny_run(const std::string& train, int batch, int micro) {
  RunConfig c;
  c.model = ModelConfig::preset("gpt2-tiny");
  c.model.n_layer = 2;
  c.model.d_model = 32;
  c.model.d_ff = 128;
  c.model.n_head = 4;
  c.model.max_seq_len = 16;
  c.seq_len = 16;
  c.batch_size = batch;
  c.micro_batch_size = micro;
  c.steps = 20;
  c.eval_every = 0;
  c.eval_batches = 1;
  c.sample_tokens = 0;
  c.threads = 1;
  c.peak_gflops = 100;
  c.out_dir = "";
  c.schedule.max_lr = 3e-3f;
  c.schedule.warmup_steps = 2;
  c.bucket_mb = 0.02;  // several buckets even for a tiny model
  c.train_data = train;
  return c;
}

struct TrainedRun {
  std::vector<double> losses;
  std::vector<float> params;
};

TrainedRun train(const RunConfig& config, DeviceMesh* mesh) {
  Trainer trainer(config, mesh, nullptr);
  TrainedRun run;
  for (int64_t s = 0; s < config.steps; ++s) run.losses.push_back(trainer.step().loss);
  const Tensor& values = trainer.model().store().values();
  run.params.assign(values.data<float>(), values.data<float>() + values.numel());
  return run;
}

void expect_same_run(const TrainedRun& reference, const TrainedRun& parallel, const char* what) {
  ASSERT_EQ(reference.losses.size(), parallel.losses.size());
  for (size_t i = 0; i < reference.losses.size(); ++i) {
    EXPECT_NEAR(parallel.losses[i], reference.losses[i], 1e-5 * std::fabs(reference.losses[i]))
        << what << ": loss of step " << i;
  }
  // Parameters: relative difference of the whole vector, ||p - p_ref|| / ||p_ref||. (Per
  // element it is ill-conditioned: Adam divides by sqrt(v), so an element whose gradient
  // is at rounding level moves by up to lr whatever the order of additions.)
  ASSERT_EQ(reference.params.size(), parallel.params.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < reference.params.size(); ++i) {
    const double d = static_cast<double>(parallel.params[i]) - reference.params[i];
    diff += d * d;
    norm += static_cast<double>(reference.params[i]) * reference.params[i];
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-5) << what << ": final parameters";
}

class DataParallelTest : public ::testing::Test {
 protected:
  DataParallelTest() {
    write_shard(dir_.file("train.bin"), testing::synthetic_text(30000, 7));
  }
  std::string data() const { return dir_.file("train.bin"); }
  testing::TempDir dir_;
};

TEST_F(DataParallelTest, MatchesOneRankOnTheSameGlobalBatch) {
  Communicator& world = testing::world();
  const RunConfig config = tiny_run(data(), 8, 8 / world.size());
  const TrainedRun reference = train(config, nullptr);
  DeviceMesh mesh(world, config.resolve_mesh(world.size()));
  const TrainedRun parallel = train(config, &mesh);
  expect_same_run(reference, parallel, "dp");
  EXPECT_LT(reference.losses.back(), reference.losses.front());
}

TEST_F(DataParallelTest, AccumulationWithAndWithoutDataParallelism) {
  Communicator& world = testing::world();
  // One rank, one micro-step of the whole batch: the reference.
  const RunConfig whole = tiny_run(data(), 8 * world.size(), 8 * world.size());
  const TrainedRun reference = train(whole, nullptr);
  // One rank, 4 micro-steps.
  RunConfig accumulated = whole;
  accumulated.micro_batch_size = 2 * world.size();
  expect_same_run(reference, train(accumulated, nullptr), "accumulation, one rank");
  // All ranks, 4 micro-steps each (no_sync on the first three).
  RunConfig both = whole;
  both.micro_batch_size = 2;
  DeviceMesh mesh(world, both.resolve_mesh(world.size()));
  expect_same_run(reference, train(both, &mesh), "accumulation with data parallelism");
}

TEST_F(DataParallelTest, CommunicatesRingVolumeOnlyOnTheLastMicroStep) {
  Communicator& world = testing::world();
  const int n = world.size();
  RunConfig config = tiny_run(data(), 4 * n, 1);  // 4 micro-steps per rank
  config.steps = 1;
  DeviceMesh mesh(world, config.resolve_mesh(n));
  Trainer trainer(config, &mesh, nullptr);
  const CommCounter before = mesh.axis("dp").stats()[CommOp::all_reduce];
  trainer.step();
  const CommCounter after = mesh.axis("dp").stats()[CommOp::all_reduce];

  const int64_t param_bytes = trainer.model().store().numel() * 4;
  const int64_t buckets = static_cast<int64_t>(DataParallel(trainer.model().store(), mesh.axis("dp"),
                                                            static_cast<size_t>(config.bucket_mb * 1024 * 1024))
                                                   .buckets()
                                                   .size());
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

TEST(DataParallelBuckets, CoverTheArenaOnceInReverseOrder) {
  Communicator& world = testing::world();
  Transformer model(ModelConfig::preset("gpt2-tiny"), 1);
  const size_t bucket_bytes = 64 * 1024;
  DataParallel ddp(model.store(), world, bucket_bytes);
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
