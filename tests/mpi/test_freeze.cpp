// train.freeze on every data-parallel layout and with tp, pp and cp: the trainable
// parameters train as on one rank, the frozen ones stay bitwise as initialised, and
// frozen parameters cost no gradient or optimizer memory (ledger = memory model) and no
// gradient communication (bytes by the counters = theory for the trainable ones).
#include "../common/one_rank_mesh.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "core/memory.h"
#include "mpi_env.h"
#include "parallel/data/shard_layout.h"
#include "parallel/memory_model.h"
#include "parity.h"
#include "shared_dir.h"

#include <gtest/gtest.h>

namespace ndt {
namespace {

const std::vector<std::string> kFrozen = {"embeddings", "blocks.0.attn", "blocks.1.mlp", "head"};

RunConfig frozen_run(const std::string& train) {
  RunConfig c = testing::tiny_run(train, 8, 0);
  c.model.freeze = kFrozen;
  c.grad_clip = 0;  // the clip factor would hide a gradient off by a constant
  return c;
}

// Every frozen element of `params` (a whole model's values in arena order) equals its
// initial value, bitwise.
void expect_frozen_unchanged(const ModelConfig& model, uint64_t seed, const std::vector<float>& params,
                             const std::string& what) {
  Transformer initial(model, seed);
  const ParameterStore& store = initial.store();
  ASSERT_EQ(params.size(), static_cast<size_t>(store.numel())) << what;
  int64_t frozen = 0, changed = 0;
  for (const Parameter& p : store.params()) {
    if (p.trainable()) continue;
    for (int64_t i = 0; i < p.numel(); ++i) {
      changed += params[static_cast<size_t>(p.arena_offset + i)] != p.data()[i];
    }
    frozen += p.numel();
  }
  EXPECT_GT(frozen, 0) << what;
  EXPECT_EQ(changed, 0) << what << ": frozen elements changed by training";
}

struct FreezeLayout {
  const char* name;
  int ranks;  // the world size it runs on
  MeshShape mesh;
  int zero_stage = 0;
  bool sequence_parallel = false;
};

std::vector<FreezeLayout> layouts(int n) {
  std::vector<FreezeLayout> all = {
      {"ddp", n, {.dp_replicate = n}},
      {"zero-1", n, {.dp_shard = n}, 1},
      {"zero-2", n, {.dp_shard = n}, 2},
      {"fsdp", n, {.dp_shard = n}, 3},
      {"tp 2 + sp", 2, {.tp = 2}, 0, true},
      {"pp 2", 2, {.pp = 2, .dp_replicate = 1}},
      {"cp 2 + fsdp", 2, {.cp = 2}, 3},
      {"hsdp 2x2", 4, {.dp_replicate = 2, .dp_shard = 2}, 3},
      {"fsdp 2 x tp 2", 4, {.dp_shard = 2, .tp = 2}, 3},
  };
  std::vector<FreezeLayout> here;
  for (const FreezeLayout& l : all) {
    if (l.ranks == n) here.push_back(l);
  }
  return here;
}

// Catches: a frozen parameter updated (weight decay on a zero gradient, moments of
// another parameter), its gradient counted in the norm, or a trainable gradient reduced
// at a frozen one's offsets.
TEST(Freeze, EveryLayoutMatchesOneRankAndLeavesFrozenParametersBitwise) {
  Communicator& world = testing::world();
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 29));
  for (bool llama : {false, true}) {
    RunConfig base = frozen_run(dir.file("train.bin"));
    if (llama) testing::use_llama(base);
    const testing::TrainedRun reference = testing::train(base, testing::one_rank_mesh());
    expect_frozen_unchanged(base.model, base.seed, reference.params, "one rank");
    for (const FreezeLayout& layout : layouts(world.size())) {
      RunConfig config = base;
      config.mesh = layout.mesh;
      config.zero_stage = layout.zero_stage;
      config.sequence_parallel = layout.sequence_parallel;
      const std::string what = std::string(llama ? "llama " : "gpt2 ") + layout.name;
      DeviceMesh mesh(world, config.resolve_mesh(world.size()));
      const testing::TrainedRun run = testing::train(config, mesh);
      testing::expect_same_run(reference, run, what.c_str());
      expect_frozen_unchanged(config.model, config.seed, run.params, what);
    }
  }
}

// Catches: gradient buffers or moments still allocated for frozen parameters.
TEST(Freeze, LedgerMatchesTheMemoryModelWithoutFrozenGradientsOrMoments) {
  Communicator& world = testing::world();
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 31));
  for (int stage : {0, 1, 2, 3}) {
    RunConfig c = frozen_run(dir.file("train.bin"));
    c.zero_stage = stage;
    c.mesh.dp_shard = stage == 0 ? 1 : world.size();
    c.steps = 1;
    DeviceMesh mesh(world, c.resolve_mesh(world.size()));
    const testing::LedgerModelStates before = testing::LedgerModelStates::now();
    Trainer trainer(c, mesh, nullptr);
    trainer.step();
    const ModelStateBytes predicted = predict_model_states(model_parameter_specs(c.model), c.mesh.dp_shard, stage);
    RunConfig unfrozen = c;
    unfrozen.model.freeze.clear();
    const ModelStateBytes whole = predict_model_states(model_parameter_specs(unfrozen.model), c.mesh.dp_shard, stage);
    EXPECT_LT(predicted.grads + predicted.optimizer, whole.grads + whole.optimizer);
    testing::expect_model_states_since(before, predicted, "frozen, stage " + std::to_string(stage));
  }
}

// The gradient bytes of a step: DDP's all-reduce and ZeRO's reduce-scatter move the
// trainable parameters' gradients only; FSDP still gathers the frozen parameters.
// Catches: frozen gradients communicated (zeros, but bytes and time).
TEST(Freeze, GradientCommunicationCarriesTheTrainableParametersOnly) {
  Communicator& world = testing::world();
  const int n = world.size();
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 37));
  RunConfig c = frozen_run(dir.file("train.bin"));
  c.steps = 1;
  Transformer probe(c.model, 1);
  const ParameterStore& store = probe.store();
  ASSERT_TRUE(store.has_frozen());
  {  // DDP: the ring all-reduce of the trainable gradients, and the 4-byte loss average
    DeviceMesh mesh(world, c.resolve_mesh(n));
    Trainer trainer(c, mesh, nullptr);
    trainer.step();
    const int64_t bytes = mesh.axis(Axis::dp).stats()[CommOp::all_reduce].wire_bytes;
    EXPECT_EQ(bytes, 2 * (n - 1) * 4 * store.grad_numel() / n + 2 * (n - 1) * 4 / n);
  }
  RunConfig fsdp = c;
  fsdp.zero_stage = 3;
  fsdp.mesh.dp_shard = n;
  DeviceMesh mesh(world, fsdp.resolve_mesh(n));
  Trainer trainer(fsdp, mesh, nullptr);
  trainer.step();
  const ShardLayout all(store, 0, n), trainable(store, {0, n}, {0, n}, ShardLayout::Members::trainable);
  int64_t root = 0, blocks = 0;
  for (size_t p = 0; p < store.params().size(); ++p) {
    (store.params()[p].name().rfind("blocks.", 0) == 0 ? blocks : root) += all.shard(p).padded_numel();
  }
  const CommStats& stats = mesh.axis(Axis::dp_shard).stats();
  EXPECT_EQ(stats[CommOp::reduce_scatter].wire_bytes, (n - 1) * 4 * trainable.arena_numel());
  // Forward gathers every unit, backward the blocks again (the root stays gathered).
  EXPECT_EQ(stats[CommOp::all_gather].wire_bytes, (n - 1) * 4 * (root + 2 * blocks));
}

// Catches: a checkpoint that drops frozen parameters or expects moments for them.
TEST(Freeze, ResumesExactlyOnAnotherLayout) {
  Communicator& world = testing::world();
  testing::TempDir data;
  write_shard(data.file("train.bin"), testing::synthetic_text(30000, 41));
  testing::SharedDir dir(world);
  RunConfig ddp = frozen_run(data.file("train.bin"));
  ddp.checkpoint_dir = dir.path().string();
  DeviceMesh ddp_mesh(world, ddp.resolve_mesh(world.size()));
  const testing::TrainedRun straight = testing::train_until(ddp, ddp_mesh, 20, "", false);
  testing::train_until(ddp, ddp_mesh, 10, "", true);
  RunConfig fsdp = ddp;
  fsdp.zero_stage = 3;
  fsdp.mesh.dp_shard = world.size();
  DeviceMesh fsdp_mesh(world, fsdp.resolve_mesh(world.size()));
  const testing::TrainedRun resumed = testing::train_until(fsdp, fsdp_mesh, 20, "latest", false);
  ASSERT_EQ(resumed.losses.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_NEAR(resumed.losses[i], straight.losses[10 + i], 1e-5 * straight.losses[10 + i]) << "step " << 10 + i;
  }
  expect_frozen_unchanged(fsdp.model, fsdp.seed, resumed.params, "resumed under fsdp");
}

}  // namespace
}  // namespace ndt
