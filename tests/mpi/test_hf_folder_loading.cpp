// train.init_from of a Hugging Face folder on sharded layouts: every rank reads only the
// bytes of the slices it holds (counted by the slice reader, against the rank's shard
// size) and the run starts from exactly the one-rank parameters; and the llama features
// such folders bring (q/k/v bias, Llama 3 rope scaling, the file's norm eps) train on
// tp = 2 as on one rank.
#include "../common/hf_folder.h"
#include "../common/one_rank_mesh.h"
#include "../train/test_support.h"
#include "interchange/hf_config.h"
#include "interchange/hf_folder.h"
#include "interchange/hf_slice_reader.h"
#include "mpi_env.h"
#include "parity.h"
#include "shared_dir.h"
#include "train/init_from.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <string>
#include <vector>

namespace ndt {
namespace {

struct Layout {
  const char* name;
  int tp, dp_shard, pp, zero_stage;
};

// The run of the tests: the folder's model, 16-token sequences.
RunConfig folder_run(const std::string& train, const ModelConfig& model) {
  RunConfig c = testing::tiny_run(train, 8, 0);
  c.model = model;
  c.grad_clip = 1e3f;  // never fires: parity sees the gradients themselves
  return c;
}

// The bytes of the parameter values this rank holds (its shard), as f32.
uint64_t shard_bytes(GradientSync& sync) {
  uint64_t bytes = 0;
  for (const StateSlice& s : sync.state_slices()) {
    if (s.kind == StateSlice::value) bytes += static_cast<uint64_t>(shape_numel(s.shape())) * sizeof(float);
  }
  return bytes;
}

// Catches: a rank reading the whole model (or another rank's rows or columns), a fused or
// biased tensor split differently from its weight, on FSDP, tp and pp.
TEST(HfFolderLoading, EveryLayoutReadsOnlyItsSlicesAndStartsFromTheOneRankParameters) {
  Communicator& world = testing::world();
  testing::SharedDir dir(world);
  testing::HfFolderSpec spec;  // qwen2: q/k/v biases; 3 shards
  spec.llama3_scaling = true;
  spec.vocab = 256;  // byte-level data
  const std::string folder = (dir.path() / "qwen2").string();
  if (world.rank() == 0) {
    testing::write_hf_folder_for_test(folder, spec);
    write_shard((dir.path() / "train.bin").string(), testing::synthetic_text(4000, 5));
  }
  world.barrier();
  const HfFolder opened = open_hf_folder(folder);
  RunConfig c = folder_run((dir.path() / "train.bin").string(), opened.config);
  c.init_from = folder;
  Trainer one(c, testing::one_rank_mesh(), nullptr);
  const std::vector<float> expected = one.full_parameters();
  const uint64_t whole = shard_bytes(one.gradient_sync());
  std::vector<Layout> layouts = {{"tp=2", 2, 1, 1, 0}, {"fsdp=2", 1, 2, 1, 3}, {"pp=2", 1, 1, 2, 0}};
  if (world.size() == 4) layouts = {{"fsdp=2 x tp=2", 2, 2, 1, 3}, {"pp=2 x tp=2", 2, 1, 2, 0}, {"fsdp=4", 1, 4, 1, 3}};
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.name);
    RunConfig lc = c;
    lc.mesh.tp = l.tp, lc.mesh.dp_shard = l.dp_shard, lc.mesh.pp = l.pp, lc.zero_stage = l.zero_stage;
    DeviceMesh mesh(world, lc.resolve_mesh(world.size()));
    Trainer trainer(lc, mesh, nullptr);
    EXPECT_EQ(trainer.full_parameters(), expected);
    const uint64_t read = load_initial_weights(folder, lc.model, trainer.gradient_sync(), mesh);
    const uint64_t shard = shard_bytes(trainer.gradient_sync());
    EXPECT_EQ(read, shard) << "each element of the rank's slices read once, nothing else";
    EXPECT_LT(read, whole * 3 / 4) << "a sharded rank reads well under the whole model";
    if (world.rank() == 0) {
      fmt::print("[hf-load] {} rank 0: read {} bytes of tensor data; its shard {} bytes; the whole model {} bytes\n",
                 l.name, read, shard, whole);
    }
  }
}

// Catches: a q/k/v bias not split over tp with its weight's output rows (or its gradient
// reduced as if replicated, or not sharded by FSDP), or rope scaling applied differently
// on a tp rank. 2 ranks: tp = 2; 4 ranks: fsdp = 2 x tp = 2.
TEST(HfFolderLoading, QkvBiasAndRopeScalingMatchOneRankOnTensorParallel) {
  Communicator& world = testing::world();
  testing::TempDir data;
  write_shard(data.file("train.bin"), testing::synthetic_text(30000, 5));
  ModelConfig model = ModelConfig::preset("llama-tiny");
  model.n_layer = 2, model.d_model = 32, model.n_head = 4, model.n_kv_head = 2, model.d_ff = 40;
  model.vocab_size = 256, model.max_seq_len = 16;
  model.qkv_bias = true;
  model.rope_scaling = RopeScaling::llama3;
  model.rope_theta = 100.0f;
  model.rope_original_max_seq_len = 8;
  model.norm_eps = 1e-6f;
  RunConfig single = folder_run(data.file("train.bin"), model);
  const testing::TrainedRun reference = testing::train(single, testing::one_rank_mesh());
  RunConfig tp = single;
  tp.mesh.tp = 2;
  tp.mesh.dp_shard = world.size() / 2;  // 4 ranks: FSDP over 2 of the tp shards
  tp.zero_stage = world.size() > 2 ? 3 : 0;
  DeviceMesh mesh(world, tp.resolve_mesh(world.size()));
  testing::expect_same_run(reference, testing::train(tp, mesh), "tp=2 (x fsdp) with qkv_bias and llama3 rope scaling");
}

}  // namespace
}  // namespace ndt
