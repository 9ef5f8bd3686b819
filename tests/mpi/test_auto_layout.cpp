// parallel.layout = "auto" under mpirun (2 and 4 ranks): the layout rank 0 chooses is the
// one every rank trains, it fits, and it trains like one rank (parity, as every layout);
// a setting the config gives stays fixed; nothing fitting stops every rank with the
// closest layout and its overflow. Each rank also runs the one-rank reference.
#include "../common/errors.h"
#include "../common/one_rank_mesh.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "core/system_memory.h"
#include "mpi_env.h"
#include "parity.h"
#include "plan/auto_layout.h"
#include "shared_dir.h"

#include <gtest/gtest.h>

#include <fstream>

namespace ndt {
namespace {

using testing::expect_same_run;
using testing::train;

class AutoLayoutRun : public ::testing::Test {
 protected:
  AutoLayoutRun() { write_shard(dir_.file("train.bin"), testing::synthetic_text(30000, 7)); }
  // tiny_run with clipping off (parity sees a gradient off by a constant factor), auto.
  RunConfig auto_run(int steps) const {
    RunConfig c = testing::tiny_run(dir_.file("train.bin"), 8, 0);
    c.steps = steps;
    c.grad_clip = 0;
    c.layout = LayoutMode::automatic;
    return c;
  }
  // The chosen layout's settings on every rank, each rank's the same as rank 0's.
  static void expect_every_rank_chose_the_same(const RunConfig& chosen) {
    Communicator& world = testing::world();
    const Layout l = Layout::of(chosen);
    const std::vector<int32_t> mine = {l.mesh.pp, l.mesh.dp_replicate, l.mesh.dp_shard, l.mesh.cp, l.mesh.tp,
                                       l.mesh.ep, l.mesh.cp_ulysses, l.zero_stage, l.sequence_parallel,
                                       static_cast<int32_t>(l.cp_mode), l.micro_batch_size,
                                       static_cast<int32_t>(l.recompute), static_cast<int32_t>(l.pp_schedule),
                                       l.pp_virtual_stages, static_cast<int32_t>(l.offload)};
    std::vector<int32_t> all(mine.size() * static_cast<size_t>(world.size()));
    world.all_gather(mine.data(), all.data(), mine.size(), DType::i32);
    for (int r = 1; r < world.size(); ++r) {
      EXPECT_TRUE(std::equal(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(r * mine.size())))
          << "rank " << r << " trains another layout than rank 0's " << l.describe();
    }
  }
  testing::TempDir dir_;
};

// Catches: ranks training different layouts (each measuring its own profile), a chosen
// layout that does not fit the machine's memory, or one that trains other numbers.
TEST_F(AutoLayoutRun, TrainsTheLayoutItChoosesLikeOneRank) {
  Communicator& world = testing::world();
  const RunConfig config = auto_run(12);  // parallel.layout_device = "cpu": this machine, measured by rank 0
  const ChosenLayout chosen = resolve_auto_layout(config, {}, world, world.size(), nullptr);
  expect_every_rank_chose_the_same(chosen.config);
  EXPECT_EQ(chosen.config.layout, LayoutMode::manual);
  EXPECT_EQ(chosen.prediction.layout, Layout::of(chosen.config).describe());
  EXPECT_GT(chosen.prediction.step_s, 0);
  EXPECT_LE(static_cast<double>(chosen.prediction.memory_bytes), physical_memory_bytes() / world.size());
  RunConfig manual = config;
  manual.layout = LayoutMode::manual;
  const testing::TrainedRun reference = train(manual, testing::one_rank_mesh());
  DeviceMesh mesh(world, chosen.config.resolve_mesh(world.size()));
  expect_same_run(reference, train(chosen.config, mesh), chosen.prediction.layout.c_str());
}

// Catches: a tensor-parallel size the config gives replaced by the search's choice.
TEST_F(AutoLayoutRun, KeepsTheTensorParallelSizeTheConfigGives) {
  Communicator& world = testing::world();
  RunConfig config = auto_run(6);
  config.mesh.tp = 2;
  config.layout_device = "h100-sxm";  // a profile on which the search, free, prefers no tp for this model
  const ChosenLayout chosen = resolve_auto_layout(config, {"parallel.tp"}, world, world.size(), nullptr);
  expect_every_rank_chose_the_same(chosen.config);
  EXPECT_EQ(chosen.config.mesh.tp, 2) << chosen.prediction.layout;
  RunConfig free = config;
  free.mesh.tp = 1;
  EXPECT_NE(resolve_auto_layout(free, {}, world, world.size(), nullptr).config.mesh.tp, 2);
  RunConfig manual = config;
  manual.layout = LayoutMode::manual, manual.mesh.tp = 1;
  const testing::TrainedRun reference = train(manual, testing::one_rank_mesh());
  DeviceMesh mesh(world, chosen.config.resolve_mesh(world.size()));
  expect_same_run(reference, train(chosen.config, mesh), chosen.prediction.layout.c_str());
}

// Catches: nothing fitting stopping rank 0 only (the others waiting forever), or an
// error that does not name the closest layout and what overflows.
TEST_F(AutoLayoutRun, NothingFitsStopsEveryRankNamingTheClosestLayout) {
  Communicator& world = testing::world();
  testing::SharedDir shared(world);
  const std::string device = (shared.path() / "small.toml").string();
  if (world.rank() == 0) {
    std::ofstream(device) << "name = \"small\"\nmemory_gib = 0.0001\npeak_tflops_fp32 = 1\npeak_tflops_bf16 = 1\n"
                             "memory_bandwidth_gb_s = 10\nintra_node_gb_s = 5\ninter_node_gb_s = 5\n";
  }
  RunConfig config = auto_run(1);
  config.layout_device = device;
  testing::expect_error([&] { resolve_auto_layout(config, {}, world, world.size(), nullptr); },
                        {"parallel.layout = \"auto\": no layout of " + std::to_string(world.size()) +
                             " small devices", "fits in memory", "the closest to fitting is ", "over the device's"});
}

}  // namespace
}  // namespace ndt
