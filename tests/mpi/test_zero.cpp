// ZeRO stages 1, 2 and 3 (FSDP) and HSDP against one rank (losses and final
// parameters), the model-state memory on every rank against the memory model, the
// bytes moved per step against DDP's, and shards of ranks that own no rows.
#include "../common/one_rank_mesh.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "core/memory.h"
#include "mpi_env.h"
#include "parallel/memory_model.h"
#include "parallel/data/shard_layout.h"
#include "parity.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ndt {
namespace {

using testing::expect_same_run;
using testing::tiny_run;
using testing::train;

class ZeroTest : public ::testing::TestWithParam<int> {
 protected:
  ZeroTest() { write_shard(dir_.file("train.bin"), testing::synthetic_text(30000, 9)); }
  RunConfig run(int stage, int dp_replicate, int dp_shard) const {
    RunConfig c = tiny_run(dir_.file("train.bin"), 8, 0);
    c.zero_stage = stage;
    c.mesh.dp_replicate = dp_replicate;
    c.mesh.dp_shard = dp_shard;
    return c;
  }
  testing::TempDir dir_;
};

// Catches: ZeRO/FSDP gradient shards reduced with a wrong factor or into wrong rows, updated rows not gathered back.
TEST_P(ZeroTest, MatchesOneRank) {
  Communicator& world = testing::world();
  const int stage = GetParam();
  // Clipping off (stages 1, 3) or a clip that never fires (stage 2): the default 1.0 clips
  // every step of this model, and the clip factor hides a gradient off by a constant.
  const float clip = stage == 2 ? 1e3f : 0.0f;
  RunConfig config = run(stage, 1, world.size());
  config.grad_clip = clip;
  RunConfig single = run(0, 1, 1);
  single.grad_clip = clip;
  const testing::TrainedRun reference = train(single, testing::one_rank_mesh());
  DeviceMesh mesh(world, config.resolve_mesh(world.size()));
  expect_same_run(reference, train(config, mesh), "zero");
}

// Catches: HSDP shards not all-reduced over replicas (or reduced twice), and a norm counting replicated shards twice.
TEST_P(ZeroTest, HybridShardingMatchesOneRank) {
  Communicator& world = testing::world();
  if (world.size() != 4) GTEST_SKIP() << "HSDP 2 x 2 needs 4 ranks";
  RunConfig config = run(GetParam(), 2, 2);
  const testing::TrainedRun reference = train(run(0, 1, 1), testing::one_rank_mesh());
  DeviceMesh mesh(world, config.resolve_mesh(world.size()));
  expect_same_run(reference, train(config, mesh), "hsdp 2x2");
}

// Catches: ranks owning no rows of a parameter (empty shards) breaking the reduce-scatter, the update or the gather.
TEST_P(ZeroTest, RanksThatOwnNoRowsStillTrain) {
  // Head dimension 2: the QK-norm weights have 2 rows, fewer than 4 ranks.
  Communicator& world = testing::world();
  RunConfig config = run(GetParam(), 1, world.size());
  config.model.arch = Arch::llama;
  config.model.tied_embeddings = false;
  config.model.n_head = 4;
  config.model.n_kv_head = 2;
  config.model.d_model = 8;
  config.model.d_ff = 24;
  config.model.qk_norm = true;
  RunConfig single = config;
  single.zero_stage = 0;
  single.mesh.dp_shard = 1;
  const testing::TrainedRun reference = train(single, testing::one_rank_mesh());
  DeviceMesh mesh(world, config.resolve_mesh(world.size()));
  expect_same_run(reference, train(config, mesh), "zero with empty shards");
}

// Catches: FSDP without reshard, without prefetch or with accumulation using stale or freed parameters.
TEST_F(ZeroTest, FsdpWithoutReshardOrPrefetchAndWithAccumulation) {
  Communicator& world = testing::world();
  const testing::TrainedRun reference = train(run(0, 1, 1), testing::one_rank_mesh());
  for (bool reshard : {false, true}) {
    RunConfig config = run(3, 1, world.size());
    config.reshard_after_forward = reshard;
    config.prefetch = !reshard;
    config.micro_batch_size = 8 / world.size() / 2;  // two micro-steps per rank
    DeviceMesh mesh(world, config.resolve_mesh(world.size()));
    expect_same_run(reference, train(config, mesh), reshard ? "fsdp, no prefetch, 2 micro-steps" : "fsdp, no reshard");
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroTest, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "stage" + std::to_string(info.param); });

// Model-state memory per rank after the first step, on every rank, against the
// memory model (exact padding) within 2%; and the model against the textbook Psi
// formulas.
// Catches: a stage that keeps whole gradients, parameters or moments it should shard, or leaks transient buffers.
TEST(ZeroMemory, LedgerMatchesTheMemoryModelOnEveryRank) {
  Communicator& world = testing::world();
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 2));
  for (int stage : {0, 1, 2, 3}) {
    RunConfig c = tiny_run(dir.file("train.bin"), 8, 0);
    c.model.d_model = 36;
    c.model.n_head = 4;
    c.model.d_ff = 100;
    c.model.max_seq_len = 18;  // 18 positions over 4 ranks: padded shards
    c.seq_len = 16;
    c.zero_stage = stage;
    c.mesh.dp_shard = stage == 0 ? 1 : world.size();
    c.steps = 1;
    DeviceMesh mesh(world, c.resolve_mesh(world.size()));
    MemoryLedger& ledger = MemoryLedger::instance();
    const testing::LedgerModelStates before = testing::LedgerModelStates::now();
    Trainer trainer(c, mesh, nullptr);
    ledger.reset_peaks();
    trainer.step();
    const ModelStateBytes predicted =
        predict_model_states(model_parameter_specs(c.model), c.mesh.dp_shard, stage);
    const std::string what = "stage " + std::to_string(stage) + ", rank " + std::to_string(world.rank());
    testing::expect_model_states_since(before, predicted, what);
    if (stage >= 2) {
      // Gradients are never whole: at most the shards, the root's (alive through
      // backward) and one block's.
      int64_t root = 0, block = 0;
      for (const ParameterSpec& spec : model_parameter_specs(c.model)) {
        if (spec.name.rfind("blocks.", 0) != 0) root += shape_numel(spec.logical_shape);
        if (spec.name.rfind("blocks.0.", 0) == 0) block += shape_numel(spec.logical_shape);
      }
      EXPECT_LE(static_cast<int64_t>(ledger.peak(MemTag::grads) - before.grads), predicted.grads + 4 * (root + block))
          << "stage " << stage << ", rank " << world.rank();
    }
    if (stage == 3) {
      // During the step: the shards plus at most the root and two gathered blocks.
      int64_t root = 0, block = 0;  // elements of the root unit and of one block (all blocks are alike)
      for (const ParameterSpec& spec : model_parameter_specs(c.model)) {
        if (spec.name.rfind("blocks.", 0) != 0) root += shape_numel(spec.logical_shape);
        if (spec.name.rfind("blocks.0.", 0) == 0) block += shape_numel(spec.logical_shape);
      }
      EXPECT_LE(static_cast<int64_t>(ledger.peak(MemTag::params) - before.params), predicted.params + 4 * (root + 2 * block))
          << "rank " << world.rank();
      EXPECT_GT(static_cast<int64_t>(ledger.peak(MemTag::params) - before.params), predicted.params + 4 * root)
          << "rank " << world.rank();
    }
    // Nothing transient is left after the step: communication buffers, gathered units.
    EXPECT_EQ(ledger.current(MemTag::comm), 0u);
    // Sampling and evaluation gather and free again (collective under FSDP).
    std::vector<int32_t> tokens = {1, 2, 3};
    std::vector<float> logits(static_cast<size_t>(c.model.vocab_size));
    trainer.model().next_token_logits(tokens.data(), 3, logits.data());
    testing::expect_within_2_percent(ledger.current(MemTag::params) - before.params, predicted.params,
                                     what + ", params after sampling");
  }
  // Padding aside, the model is the textbook formula: gpt2-124m on 8 ranks.
  const auto specs = model_parameter_specs(ModelConfig::preset("gpt2-124m"));
  const int64_t psi = count_parameters(ModelConfig::preset("gpt2-124m"));
  for (int stage : {0, 1, 2, 3}) {
    const ModelStateBytes exact = predict_model_states(specs, 8, stage);
    const ModelStateBytes formula = model_states_from_count(psi, 8, stage);
    EXPECT_NEAR(static_cast<double>(exact.total()), static_cast<double>(formula.total()), 0.001 * formula.total());
  }
  EXPECT_EQ(model_states_from_count(1000, 4, 0).total(), 16 * 1000);
  EXPECT_EQ(model_states_from_count(1000, 4, 1).total(), 8 * 1000 + 8 * 1000 / 4);
  EXPECT_EQ(model_states_from_count(1000, 4, 2).total(), 4 * 1000 + 12 * 1000 / 4);
  EXPECT_EQ(model_states_from_count(1000, 4, 3).total(), 16 * 1000 / 4);
}

// Stages 1 and 2 move DDP's volume: reduce-scatter + all-gather = the ring all-reduce.
// Catches: extra or missing collectives per step (FSDP gathering the root twice, or re-gathering what it kept).
TEST(ZeroCommunication, BytesPerStepEqualDdp) {
  Communicator& world = testing::world();
  const int n = world.size();
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 3));
  RunConfig c = tiny_run(dir.file("train.bin"), 8, 0);
  c.steps = 1;
  auto wire_bytes = [&](int stage) {
    RunConfig config = c;
    config.zero_stage = stage;
    config.mesh.dp_shard = stage == 0 ? 1 : n;
    DeviceMesh mesh(world, config.resolve_mesh(n));
    Trainer trainer(config, mesh, nullptr);
    trainer.step();
    // Gradients and parameters only: the dp axis also carries the 4-byte loss average.
    return stage == 0 ? mesh.axis(Axis::dp).stats()[CommOp::all_reduce].wire_bytes - 2 * (n - 1) * 4 / n
                      : mesh.axis(Axis::dp_shard).stats().total_wire_bytes();
  };
  const double ddp = static_cast<double>(wire_bytes(0));
  const int64_t psi_bytes = count_parameters(c.model) * 4;
  EXPECT_NEAR(ddp, 2.0 * (n - 1) / n * psi_bytes, 64.0);
  for (int stage : {1, 2}) {
    // Shard padding adds a little; the grad-norm all-reduce adds 4 bytes.
    EXPECT_NEAR(static_cast<double>(wire_bytes(stage)), ddp, 0.02 * ddp) << "stage " << stage;
  }
  // Stage 3: all-gather in forward (every unit), again in backward (the blocks; the
  // root stays gathered), reduce-scatter: about 1.5x DDP. Exactly, per unit of padded
  // shard size s: (n - 1) x 4 s bytes per collective.
  const ModelConfig& m = c.model;
  Transformer probe(m, 1);
  const ShardLayout layout(probe.store(), 0, n);
  int64_t root = 0, blocks = 0;
  for (size_t p = 0; p < probe.store().params().size(); ++p) {
    const int64_t s = layout.shard(p).padded_numel();
    (probe.store().params()[p].name().rfind("blocks.", 0) == 0 ? blocks : root) += s;
  }
  const int64_t expected = (n - 1) * 4 * (2 * root + 3 * blocks) + 2 * (n - 1) * 4 / n;  // + the norm's all-reduce
  const int64_t fsdp = wire_bytes(3);
  EXPECT_EQ(fsdp, expected);
  EXPECT_GT(fsdp / ddp, 1.35);
  EXPECT_LE(fsdp / ddp, 1.52);
}

// Catches: shard rows computed with floor instead of ceil, or pack/unpack misplacing rows when ranks own none.
TEST(ShardLayout, MoreRanksThanRows) {
  ParameterStore store({{"a", {3, 2}, InitKind::normal, 1.0f, true},
                        {"b", {1}, InitKind::ones, 0, false},
                        {"c", {5, 3}, InitKind::normal, 1.0f, true}},
                       1);
  const int n = 4;
  std::vector<float> gathered(static_cast<size_t>(store.numel()), -1.0f);
  std::vector<float> blocks;
  for (int r = 0; r < n; ++r) {
    ShardLayout layout(store, r, n);
    EXPECT_EQ(layout.arena_numel(), 1 * 2 + 1 * 1 + 2 * 3);  // padded rows: 1, 1, 2
    const ParameterShard& a = layout.shard(0);
    EXPECT_EQ(a.end_row - a.begin_row, r < 3 ? 1 : 0) << "rank " << r;
    EXPECT_EQ(layout.shard(1).owned_numel(), r == 0 ? 1 : 0);
    EXPECT_EQ(layout.shard(2).end_row - layout.shard(2).begin_row, r < 2 ? 2 : (r == 2 ? 1 : 0));
    std::vector<float> block(static_cast<size_t>(layout.arena_numel()));
    layout.pack(store.values().data<float>(), layout.arena_slots(0, 3), r, block.data());
    blocks.insert(blocks.end(), block.begin(), block.end());
  }
  ShardLayout layout(store, 0, n);
  layout.unpack_all(blocks.data(), layout.arena_slots(0, 3), gathered.data());
  for (int64_t i = 0; i < store.numel(); ++i) EXPECT_EQ(gathered[i], store.values().data<float>()[i]) << i;
}

}  // namespace
}  // namespace ndt
