// The feature matrix: every data-parallel layout against the one-rank run, for both
// model families (GPT-2; Llama with grouped K/V heads, RoPE and QK-norm) and with
// gradient accumulation, checked for loss, gradient-norm and parameter parity as in
// parity.h. GPT-2 runs with clipping off (grad_clip 0), Llama with a clip so large it
// never fires (1e3): with the default clip of 1.0 every step of these tiny models
// (norms 2 - 3.5) is clipped, and the clip factor hides a gradient off by a constant.
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "mpi_env.h"
#include "parity.h"

#include <gtest/gtest.h>

#include <string>

namespace ndt {
namespace {

struct Layout {
  const char* name;
  int zero_stage;
  bool hsdp;  // dp_replicate = 2 x dp_shard = world / 2 (needs an even world of 4+)
};

// Catches: a layout's gradient reduction or shard rows wrong (a constant factor too), either family, with accumulation.
TEST(FeatureMatrix, EveryLayoutMatchesOneRankForBothFamilies) {
  Communicator& world = testing::world();
  const int n = world.size();
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 21));
  const Layout layouts[] = {{"ddp", 0, false},  {"zero1", 1, false}, {"zero2", 2, false},
                            {"fsdp", 3, false}, {"hsdp1", 1, true},  {"hsdp3", 3, true}};
  for (bool llama : {false, true}) {
    RunConfig base = testing::tiny_run(dir.file("train.bin"), 8, 0);
    base.steps = 6;
    base.grad_clip = llama ? 1e3f : 0.0f;  // a clip that never fires; clipping off
    if (llama) {
      base.model.arch = Arch::llama;
      base.model.tied_embeddings = false;
      base.model.n_head = 4;
      base.model.n_kv_head = 2;
      base.model.qk_norm = true;
      base.model.d_ff = 88;
    }
    const testing::TrainedRun reference = testing::train(base, nullptr);
    for (const Layout& layout : layouts) {
      if (layout.hsdp && n < 4) continue;
      for (int micro : {0, 1}) {  // no accumulation, and one sequence per micro-step
        RunConfig config = base;
        config.zero_stage = layout.zero_stage;
        config.mesh.dp_shard = layout.zero_stage == 0 ? 1 : (layout.hsdp ? n / 2 : n);
        config.micro_batch_size = micro;
        DeviceMesh mesh(world, config.resolve_mesh(n));
        const std::string what = std::string(llama ? "llama " : "gpt2 ") + layout.name +
                                 (micro ? ", accumulation" : "");
        testing::expect_same_run(reference, testing::train(config, &mesh), what.c_str());
      }
    }
  }
}

}  // namespace
}  // namespace ndt
