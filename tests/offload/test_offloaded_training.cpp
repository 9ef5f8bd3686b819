// Offloaded training on one rank equals in-memory training bit for bit: ZeRO-1, ZeRO-2
// and FSDP with the optimizer on disk, FSDP with the parameters and gradients on disk
// too, with and without gradient accumulation, GPT-2 and Llama, over 20 steps (losses,
// gradient norms, final parameters).
#include "../common/temp_dir.h"
#include "offload_runs.h"

#include <gtest/gtest.h>

namespace ndt {
namespace {

struct Case {
  const char* name;
  int stage;
  bool params;      // offload.params = "disk" too
  int micro_batch;  // 0: the whole batch; 4: two micro-steps accumulated
  bool llama;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class OffloadedTraining : public ::testing::TestWithParam<Case> {
 protected:
  OffloadedTraining() { write_shard(dir_.file("train.bin"), testing::synthetic_text(20000, 5)); }
  RunConfig run(bool offload) const {
    const Case& k = GetParam();
    RunConfig c = testing::offload_run(dir_.file("train.bin"), k.stage, offload, offload && k.params, dir_.file("swap"));
    if (k.micro_batch > 0) c.micro_batch_size = k.micro_batch;
    if (k.llama) {
      c.model.arch = Arch::llama;
      c.model.tied_embeddings = false;
      c.model.n_kv_head = 2;
      c.model.d_ff = 160;
    }
    return c;
  }
  testing::TempDir dir_;
};

// Catches: a chunk updated twice or not at all, moments of one parameter applied to
// another (a layout off by a unit's padding), gradients accumulated onto stale ones, a
// gradient norm summed in another order, a prefetched shard of the wrong unit.
TEST_P(OffloadedTraining, EqualsInMemoryTrainingBitwise) {
  const testing::TrainedRun memory = testing::train(run(false), testing::one_rank_mesh());
  const testing::TrainedRun disk = testing::train(run(true), testing::one_rank_mesh());
  testing::expect_bitwise(memory, disk, GetParam().name);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "swap" / "rank-00000" / "exp_avg.swap"))
      << "the swap files go with the run";
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, OffloadedTraining,
    ::testing::Values(Case{"zero1_optimizer", 1, false, 0, false}, Case{"zero2_optimizer", 2, false, 0, false},
                      Case{"fsdp_optimizer", 3, false, 0, false}, Case{"fsdp_params", 3, true, 0, false},
                      Case{"fsdp_params_accumulated", 3, true, 4, false}, Case{"zero1_accumulated", 1, false, 4, false},
                      Case{"llama_fsdp_params", 3, true, 0, true}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ndt
