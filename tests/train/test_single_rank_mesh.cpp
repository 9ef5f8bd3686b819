// One rank is a mesh of size one (comm/self_communicator.h): every data-parallel
// strategy runs in a single process, with no mpirun. ZeRO-1/2 and FSDP over one rank
// shard nothing, so they train as DDP does (each reduction a copy of the rank's own
// gradients), and their model states are the memory model's for one rank.
#include "../common/one_rank_mesh.h"
#include "../mpi/parity.h"
#include "parallel/data/fsdp.h"
#include "parallel/memory_model.h"
#include "test_support.h"
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ndt {
namespace {

class SingleRankMesh : public ::testing::Test {
 protected:
  void SetUp() override { write_shard(dir_.file("train.bin"), testing::synthetic_text(20000, 3)); }
  RunConfig run(int zero_stage) const {
    RunConfig c = testing::small_run(dir_.file("train.bin"), 6);
    c.zero_stage = zero_stage;
    c.micro_batch_size = 4;  // two micro-steps: no_sync accumulation under every stage
    return c;
  }
  testing::TempDir dir_;
};

// Catches: a ZeRO or FSDP path that needs MPI, or that a group of one rank changes
// (a reduce-scatter or all-gather of size one that is not a plain copy).
TEST_F(SingleRankMesh, EveryZeroStageTrainsAsDdp) {
  const testing::TrainedRun ddp = testing::train(run(0), testing::one_rank_mesh());
  for (int stage : {1, 2, 3}) {
    const testing::TrainedRun sharded = testing::train(run(stage), testing::one_rank_mesh());
    for (size_t s = 0; s < ddp.losses.size(); ++s) {
      EXPECT_NEAR(sharded.losses[s], ddp.losses[s], 1e-5 * std::abs(ddp.losses[s])) << "stage " << stage << ", step " << s;
      EXPECT_NEAR(sharded.grad_norms[s], ddp.grad_norms[s], 1e-5 * std::abs(ddp.grad_norms[s])) << "stage " << stage << ", step " << s;
    }
    ASSERT_EQ(sharded.params.size(), ddp.params.size());
    double worst = 0;
    for (size_t i = 0; i < ddp.params.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::abs(sharded.params[i] - ddp.params[i])));
    }
    EXPECT_LT(worst, 1e-5) << "stage " << stage << ": the largest parameter difference after 6 steps";
  }
}

// Catches: FSDP on one rank keeping a second copy of the parameters or gradients.
TEST_F(SingleRankMesh, Fsdp3ModelStatesAreTheMemoryModelsForOneRank) {
  const MemoryLedger& ledger = MemoryLedger::instance();
  const size_t params = ledger.current(MemTag::params), grads = ledger.current(MemTag::grads),
               optimizer = ledger.current(MemTag::optimizer);
  RunConfig c = run(3);
  Trainer trainer(c, testing::one_rank_mesh(), nullptr);
  trainer.step();
  ASSERT_NE(dynamic_cast<FullyShardedDataParallel*>(&trainer.gradient_sync()), nullptr);
  const ModelStateBytes predicted = predict_model_states(model_parameter_specs(c.model), 1, 3);
  EXPECT_NEAR(static_cast<double>(ledger.current(MemTag::params) - params), predicted.params, 0.02 * predicted.params);
  EXPECT_NEAR(static_cast<double>(ledger.current(MemTag::grads) - grads), predicted.grads, 0.02 * predicted.grads);
  EXPECT_NEAR(static_cast<double>(ledger.current(MemTag::optimizer) - optimizer), predicted.optimizer,
              0.02 * predicted.optimizer);
}

}  // namespace
}  // namespace ndt
