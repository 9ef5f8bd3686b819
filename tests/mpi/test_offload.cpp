// Offload under mpirun: each rank streams its own shard of the model states through its
// own swap folder, and training equals the same layout in memory bit for bit (losses,
// gradient norms, final parameters over 20 steps): ZeRO-1, ZeRO-2 and FSDP with the
// optimizer on disk, FSDP with parameters and gradients on disk too, and on 4 ranks
// FSDP under pipeline parallelism (pp 2 x dp_shard 2), each stage offloading its own units.
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "mpi_env.h"
#include "parity.h"
#include "shared_dir.h"

#include <gtest/gtest.h>

namespace ndt {
namespace {

struct Case {
  const char* name;
  int stage;
  bool params;
  int pp;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class OffloadMpi : public ::testing::TestWithParam<Case> {
 protected:
  OffloadMpi() { write_shard(dir_.file("train.bin"), testing::synthetic_text(30000, 13)); }
  RunConfig run(const Case& k, int world_size) const {
    RunConfig c = testing::tiny_run(dir_.file("train.bin"), 8, 0);
    c.zero_stage = k.stage;
    c.mesh.pp = k.pp;
    c.mesh.dp_shard = world_size / k.pp;
    if (k.pp > 1) c.micro_batch_size = 2, c.model.n_layer = 4;
    c.offload_chunk_mb = 4.0 / 1024;  // 1024 floats: several chunks per unit even for this model
    return c;
  }
  testing::TempDir dir_;
};

// Catches: a rank streaming another rank's shard or the wrong rows of its own, a swap
// folder shared by two ranks, gradient shards written before the reduce-scatter was
// summed in, a stage reading units it does not hold.
TEST_P(OffloadMpi, EqualsTheSameLayoutInMemoryBitwise) {
  Communicator& world = testing::world();
  const Case& k = GetParam();
  if (world.size() % (2 * k.pp) != 0) GTEST_SKIP() << k.name << " needs a multiple of " << 2 * k.pp << " ranks";
  testing::SharedDir shared(world);
  RunConfig memory = run(k, world.size());
  RunConfig disk = memory;
  disk.offload_optimizer = true;
  disk.offload_params = k.params;
  disk.offload_dir = (shared.path() / "swap").string();
  const testing::TrainedRun a = testing::train_on_world(memory), b = testing::train_on_world(disk);
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t s = 0; s < a.losses.size(); ++s) {
    EXPECT_EQ(b.losses[s], a.losses[s]) << k.name << ": loss of step " << s + 1 << " on rank " << world.rank();
    EXPECT_EQ(b.grad_norms[s], a.grad_norms[s]) << k.name << ": norm of step " << s + 1 << " on rank " << world.rank();
  }
  ASSERT_EQ(a.params.size(), b.params.size());
  size_t differ = 0;
  for (size_t i = 0; i < a.params.size(); ++i) differ += a.params[i] != b.params[i];
  EXPECT_EQ(differ, 0u) << k.name << ": parameters that differ on rank " << world.rank();
}

INSTANTIATE_TEST_SUITE_P(Layouts, OffloadMpi,
                         ::testing::Values(Case{"zero1", 1, false, 1}, Case{"zero2", 2, false, 1},
                                           Case{"fsdp", 3, false, 1}, Case{"fsdp_params", 3, true, 1},
                                           Case{"pp2_fsdp_params", 3, true, 2}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ndt
