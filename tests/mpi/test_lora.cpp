// LoRA (docs/fine_tuning.md) on every layout: DDP, ZeRO-1/2, FSDP, HSDP, tp + sp, pp
// (1F1B and zero-bubble), cp, fsdp x tp, with full and selective activation
// checkpointing, train like LoRA on one rank over 20 steps: losses, gradient norms and
// the adapters within 1e-5 (parity.h), the frozen base weights unchanged; bf16 held to
// its own rounding as the precision tests do. Both families, adapters on every linear.
#include "../common/one_rank_mesh.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "model/lora.h"
#include "mpi_env.h"
#include "parity.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace ndt {
namespace {

struct Layout {
  const char* name;
  MeshShape mesh;  // dp_replicate 0: the rest of the world
  int zero_stage = 0;
  bool sequence_parallel = false;
  int micro = 0;
  const char* schedule = "1f1b";
  CheckpointMode recompute = CheckpointMode::none;
};

MeshShape mesh(int pp, int dp_shard, int cp, int tp) {
  MeshShape m;
  m.pp = pp, m.dp_replicate = 0, m.dp_shard = dp_shard, m.cp = cp, m.tp = tp;
  return m;
}

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {
      {"ddp", mesh(1, 1, 1, 1)},
      {"zero1", mesh(1, 4, 1, 1), 1},
      {"zero2", mesh(1, 4, 1, 1), 2},
      {"fsdp", mesh(1, 4, 1, 1), 3},
      {"hsdp (fsdp)", mesh(1, 2, 1, 1), 3},
      {"tp + sp", mesh(1, 1, 1, 4), 0, true},
      {"tp", mesh(1, 1, 1, 2)},
      {"pp x ddp", mesh(2, 1, 1, 1), 0, false, 1},
      {"pp zero-bubble x ddp", mesh(2, 1, 1, 1), 0, false, 1, "zb_h1"},
      {"cp", mesh(1, 1, 4, 1)},
      {"fsdp x tp + sp", mesh(1, 2, 1, 2), 3, true},
      {"ddp, full recompute", mesh(1, 1, 1, 1), 0, false, 0, "1f1b", CheckpointMode::full},
      {"tp + sp, selective recompute", mesh(1, 1, 1, 2), 0, true, 0, "1f1b", CheckpointMode::selective},
  };
  return all;
}

RunConfig lora_run(const std::string& train_file, bool llama) {
  RunConfig c = testing::tiny_run(train_file, 8, 0);
  if (llama) testing::use_llama(c);
  c.model.lora.targets = {"*"};
  c.model.lora.rank = 4;
  c.model.lora.alpha = 8;
  c.grad_clip = llama ? 1e3f : 0.0f;  // a clip factor would hide a gradient off by a constant
  c.schedule.max_lr = 1e-2f;          // the adapters move visibly in 20 steps
  return c;
}

// The run's parameters split into the adapters and the frozen rest (in store order).
struct Split {
  std::vector<float> adapters, frozen;
};

Split split(const RunConfig& c, const std::vector<float>& params) {
  Split s;
  size_t at = 0;
  for (const ParameterSpec& spec : model_parameter_specs(c.model)) {
    const auto n = static_cast<size_t>(shape_numel(spec.logical_shape));
    std::vector<float>& to = spec.frozen ? s.frozen : s.adapters;
    to.insert(to.end(), params.begin() + static_cast<ptrdiff_t>(at), params.begin() + static_cast<ptrdiff_t>(at + n));
    at += n;
  }
  EXPECT_EQ(at, params.size());
  return s;
}

// Losses, gradient norms and the adapters (whose relative difference the frozen weights
// would dilute) as expect_same_run compares them; the frozen weights bitwise equal.
void expect_same_lora_run(const RunConfig& c, const testing::TrainedRun& reference, testing::TrainedRun run,
                          const std::string& what) {
  const Split ref = split(c, reference.params), got = split(c, run.params);
  EXPECT_TRUE(ref.frozen == got.frozen) << what << ": frozen weights differ";
  testing::TrainedRun ref_adapters = reference;
  ref_adapters.params = ref.adapters;
  run.params = got.adapters;
  testing::expect_same_run(ref_adapters, run, what.c_str());
}

// Catches: an adapter factor split or reduced wrong on any axis (the replicated
// factor's partial gradient over tp, under sequence parallel too; FSDP groups, ZeRO
// shards and DDP buckets holding adapters beside frozen weights), a pipeline stage or
// a zero-bubble weight half that loses or doubles the adapters' gradients, recompute
// that rebuilds the adapter's output differently, frozen weights updated on any layout.
TEST(LoraParity, EveryLayoutMatchesOneRank) {
  Communicator& world = testing::world();
  if (world.size() != 4) GTEST_SKIP() << "the LoRA layouts run on 4 ranks";
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 23));
  for (bool llama : {false, true}) {
    const RunConfig base = lora_run(dir.file("train.bin"), llama);
    const testing::TrainedRun reference = testing::train(base, testing::one_rank_mesh());
    // The base weights never move; the adapters do.
    const Split start = split(base, Trainer(base, testing::one_rank_mesh(), nullptr).full_parameters());
    const Split end = split(base, reference.params);
    EXPECT_TRUE(start.frozen == end.frozen) << "one rank: frozen weights changed";
    EXPECT_FALSE(start.adapters == end.adapters);
    for (const Layout& l : layouts()) {
      RunConfig c = base;
      c.mesh = l.mesh;
      c.zero_stage = l.zero_stage;
      c.sequence_parallel = l.sequence_parallel;
      c.micro_batch_size = l.micro;
      c.pp_schedule = pipeline_schedule_from_name(l.schedule);
      c.activation_checkpointing.mode = l.recompute;
      DeviceMesh m(world, c.resolve_mesh(world.size()));
      expect_same_lora_run(c, reference, testing::train(c, m), fmt::format("{} {}", llama ? "llama" : "gpt2", l.name));
    }
  }
}

// The largest relative difference of the losses over the steps, and of the adapters.
struct Difference {
  double losses = 0, adapters = 0;
};

Difference compare(const RunConfig& c, const testing::TrainedRun& reference, const testing::TrainedRun& run) {
  Difference d;
  for (size_t i = 0; i < reference.losses.size(); ++i) {
    d.losses = std::max(d.losses, std::fabs(run.losses[i] - reference.losses[i]) / std::fabs(reference.losses[i]));
  }
  const Split a = split(c, reference.params), b = split(c, run.params);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.adapters.size(); ++i) {
    const double e = static_cast<double>(b.adapters[i]) - a.adapters[i];
    diff += e * e, norm += static_cast<double>(a.adapters[i]) * a.adapters[i];
  }
  d.adapters = std::sqrt(diff / norm);
  return d;
}

// Catches: adapters multiplied outside the compute dtype's path on some layout (their
// compute copies not refreshed or not gathered under FSDP, a tp block multiplied in
// fp32 on one layout and bf16 on another). The bound is the run's own rounding, as in
// test_precision.cpp: the one-rank fp32 run against the one-rank bf16 run.
TEST(LoraParity, Bf16OnEveryLayoutWithinItsOwnRounding) {
  Communicator& world = testing::world();
  if (world.size() != 4) GTEST_SKIP() << "the LoRA layouts run on 4 ranks";
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 23));
  RunConfig single = lora_run(dir.file("train.bin"), /*llama=*/true);
  RunConfig fp32 = single;
  single.precision.compute = DType::bf16;
  const testing::TrainedRun reference = testing::train(single, testing::one_rank_mesh());
  const Difference band = compare(single, testing::train(fp32, testing::one_rank_mesh()), reference);
  for (const Layout& l : {Layout{"fsdp", mesh(1, 4, 1, 1), 3}, Layout{"fsdp x tp + sp", mesh(1, 2, 1, 2), 3, true}}) {
    RunConfig c = single;
    c.mesh = l.mesh;
    c.zero_stage = l.zero_stage;
    c.sequence_parallel = l.sequence_parallel;
    DeviceMesh m(world, c.resolve_mesh(world.size()));
    const Difference d = compare(c, reference, testing::train(c, m));
    if (world.rank() == 0) {
      fmt::print("LoRA bf16 {} against one rank: loss {:.1e}, adapters {:.1e} (bf16's own distance from fp32: {:.1e}, "
                 "{:.1e})\n", l.name, d.losses, d.adapters, band.losses, band.adapters);
    }
    EXPECT_LT(d.losses, band.losses) << l.name;
    EXPECT_LT(d.adapters, band.adapters) << l.name;
  }
}

}  // namespace
}  // namespace ndt
