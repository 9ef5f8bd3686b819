// Mixture of experts under mpirun (docs/moe.md): expert parallelism against one rank
// for both families (dropless and with a capacity: losses, load-balancing loss,
// gradient norms, tokens per expert and final parameters), composed with tensor,
// context and pipeline parallelism, accumulation, recompute and the ZeRO/FSDP layouts
// (experts not split over ep); the all-to-all bytes on ep against the routed token
// counts; checkpoints saved under ep = 2 and resumed on one rank and on ep = 4.
#include "../common/one_rank_mesh.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "mpi_env.h"
#include "parity.h"
#include "shared_dir.h"

#include "checkpoint/directory.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>

namespace ndt {
namespace {

using testing::expect_same_run;
using testing::train;

// testing::moe_run with more of the router: GPT-2 with a shared MLP and softmax scores,
// Llama with sigmoid scores and a router z-loss.
RunConfig moe_run(const std::string& train_file, bool llama) {
  RunConfig c = testing::moe_run(train_file, llama);
  if (llama) {
    c.model.moe_score = MoeScore::sigmoid;
    c.model.moe_z_loss = 1e-3f;
  } else {
    c.model.moe_shared_d_ff = 32;
  }
  return c;
}

// Expert parallelism over `ep` of the data-parallel ranks (dp_shard: DDP with zero_stage 0).
RunConfig with_ep(RunConfig c, int dp_shard, int ep) {
  c.mesh.dp_shard = dp_shard;
  c.mesh.ep = ep;
  return c;
}

class MoeTest : public ::testing::TestWithParam<testing::Family> {
 protected:
  MoeTest() { write_shard(dir_.file("train.bin"), testing::synthetic_text(30000, 17)); }
  RunConfig run() const { return moe_run(dir_.file("train.bin"), GetParam().llama); }
  testing::TempDir dir_;
};

// Catches: rows sent to the wrong expert or back to the wrong token, expert gradients
// reduced over all data-parallel ranks (or none), the norm counting experts once per
// ep rank, the load-balancing loss over a rank's tokens instead of each sequence's.
TEST_P(MoeTest, ExpertParallelMatchesOneRank) {
  const int n = testing::world().size();
  const testing::TrainedRun reference = train(run(), testing::one_rank_mesh());
  EXPECT_GT(reference.moe_aux.back(), 0.0);
  expect_same_run(reference, testing::train_on_world(run()), "DDP, every expert on every rank");
  expect_same_run(reference, testing::train_on_world(with_ep(run(), n, n)), ("ep=" + std::to_string(n)).c_str());
  if (n == 4) expect_same_run(reference, testing::train_on_world(with_ep(run(), 4, 2)), "ep=2 x edp=2");
}

// Catches: drops decided over a rank's batch instead of each sequence, or differently
// after the all-to-all.
TEST_P(MoeTest, CapacityDropsTheSameTokensOnEveryLayout) {
  const int n = testing::world().size();
  RunConfig c = run();
  c.model.moe_capacity_factor = 1.0f;
  c.steps = 10;
  const testing::TrainedRun reference = train(c, testing::one_rank_mesh());
  expect_same_run(reference, testing::train_on_world(with_ep(c, n, n)), "capacity 1.0, ep=world");
  RunConfig accumulated = with_ep(c, n, 2);
  accumulated.micro_batch_size = 1;
  expect_same_run(reference, testing::train_on_world(accumulated), "capacity 1.0, ep=2, accumulation");
}

// Catches: ep groups built across tp or pp ranks, the router's tp-partial gradient not
// reduced (or the loss gradients added on every tp rank), experts' tp slices wrong, the
// per-sequence statistics not summed over cp, a recompute re-adding the losses.
TEST_P(MoeTest, ComposesWithTheOtherAxes) {
  if (testing::world().size() != 4) GTEST_SKIP() << "needs 4 ranks";
  RunConfig base = run();
  base.steps = 10;
  const testing::TrainedRun reference = train(base, testing::one_rank_mesh());
  {
    RunConfig c = with_ep(base, 2, 2);
    c.mesh.tp = 2;
    c.sequence_parallel = true;
    expect_same_run(reference, testing::train_on_world(c), "ep=2 x tp=2 (sequence parallel)");
  }
  {
    RunConfig c = with_ep(base, 1, 2);  // ep over the two cp ranks, DDP over 2 replicas
    c.mesh.cp = 2;
    expect_same_run(reference, testing::train_on_world(c), "dp=2 x cp=2, ep=2 over cp");
  }
  {
    RunConfig c = with_ep(base, 2, 2);
    c.mesh.pp = 2;
    c.micro_batch_size = 1;
    expect_same_run(reference, testing::train_on_world(c), "pp=2 x ep=2");
  }
  {
    RunConfig c = with_ep(base, 4, 2);
    c.activation_checkpointing.mode = CheckpointMode::full;
    expect_same_run(reference, testing::train_on_world(c), "ep=2, full recompute");
  }
  for (int stage : {1, 3}) {  // experts sharded by ZeRO like any parameter
    RunConfig c = base;
    c.mesh.dp_shard = 4;
    c.zero_stage = stage;
    expect_same_run(reference, testing::train_on_world(c), ("zero stage " + std::to_string(stage) + ", no ep").c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Families, MoeTest, ::testing::Values(testing::Family{"gpt2", false}, testing::Family{"llama", true}),
                         [](const auto& info) { return std::string(info.param.name); });

// One step's traffic on ep, summed over the ranks: the row exchanges carry every kept
// assignment's row of d_model floats four times (dispatch and combine, forward and
// backward), exactly; the count exchange gathers E int32 from every rank, once per MoE
// block and micro-step (forward only: backward reuses the route); the gradient norm's one
// float; nothing else travels on ep. The step records the experts' load.
// Catches: a row sent twice, a count exchange in backward, a reduction on the ep group, an
// experts' load not recorded.
TEST(MoeComm, AllToAllBytesEqualTheRoutedTokens) {
  Communicator& world = testing::world();
  const int n = world.size();
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 19));
  RunConfig c = with_ep(moe_run(dir.file("train.bin"), false), n, n);
  c.steps = 1;
  c.micro_batch_size = 1;  // several micro-steps
  DeviceMesh mesh(world, c.resolve_mesh(n));
  Trainer trainer(c, mesh, nullptr);
  const CommStats before = mesh.axis(Axis::ep).stats();
  const StepStats s = trainer.step();
  const CommStats& after = mesh.axis(Axis::ep).stats();
  auto summed = [&](CommOp op) {
    float v[2] = {static_cast<float>(after[op].calls - before[op].calls),
                  static_cast<float>(after[op].payload_bytes - before[op].payload_bytes)};
    world.all_reduce(v, 2, DType::f32, ReduceOp::sum);
    return std::pair{static_cast<int64_t>(v[0]), static_cast<int64_t>(v[1])};
  };
  const int64_t routed = std::accumulate(s.moe_tokens_per_expert.begin(), s.moe_tokens_per_expert.end(), int64_t{0});
  EXPECT_EQ(routed, int64_t{c.batch_size} * c.seq_len * c.model.moe_top_k * c.model.n_layer) << "dropless";
  const int64_t micro_steps = c.batch_size / n, blocks = c.model.n_layer;
  EXPECT_EQ(summed(CommOp::all_to_all_v), std::pair(n * micro_steps * blocks * 4, routed * c.model.d_model * 4 * 4));
  EXPECT_EQ(summed(CommOp::all_gather),
            std::pair(n * micro_steps * blocks, n * micro_steps * blocks * n * c.model.n_experts * 4));
  // The gradient norm sums the experts' squares over ep: one all-reduce of one float.
  EXPECT_EQ(summed(CommOp::all_reduce), std::pair(int64_t{n}, int64_t{n} * 4));
  for (CommOp op : {CommOp::all_to_all, CommOp::reduce_scatter, CommOp::send}) {
    EXPECT_EQ(after[op].calls - before[op].calls, 0) << comm_op_name(op) << " on ep";
  }
  // The experts' load: 1 on one rank; on more, above 1 unless every block's every
  // micro-step split its rows evenly, and at most n (one rank processing every row).
  if (n == 1) {
    EXPECT_EQ(s.moe_expert_load, 1.0);
  } else {
    EXPECT_GT(s.moe_expert_load, 1.0);
  }
  EXPECT_LE(s.moe_expert_load, n);
}

// Saved under ep = 2, resumed on one rank and on ep = world: the experts' blocks are
// written once each and read back into whatever split the new run has.
// Catches: an expert block saved by every edp rank or by none, experts read into the wrong rows.
TEST(MoeCheckpoint, ExpertsReshardAcrossEpSizes) {
  Communicator& world = testing::world();
  const int n = world.size();
  testing::SharedDir dir(world);
  testing::TempDir data, own;
  write_shard(data.file("train.bin"), testing::synthetic_text(30000, 23));
  auto config = [&](int dp_shard, int ep, const std::filesystem::path& folder) {
    RunConfig c = with_ep(moe_run(data.file("train.bin"), true), dp_shard, ep);
    c.checkpoint_dir = folder.string();
    return c;
  };
  const testing::TrainedRun reference = testing::train_until(config(1, 1, own.path()), testing::one_rank_mesh(), 20, "", false);
  {
    const RunConfig c = config(n, 2, dir.path());
    DeviceMesh mesh(world, c.resolve_mesh(n));
    testing::train_until(c, mesh, 10, "", true);
  }
  const std::string saved_step = (dir.path() / ckpt::checkpoint_dir_name(10)).string();
  testing::expect_resumed(reference, testing::train_until(config(1, 1, own.path()), testing::one_rank_mesh(), 20, saved_step, false), 10,
                          "one rank");
  const RunConfig c = config(n, n, dir.path());
  DeviceMesh mesh(world, c.resolve_mesh(n));
  testing::expect_resumed(reference, testing::train_until(c, mesh, 20, "latest", false), 10,
                          ("ep=" + std::to_string(n)).c_str());
}

}  // namespace
}  // namespace ndt
