// Seq1F1B (parallel.pp_schedule = "seq1f1b") against one rank: k = 2 and 4 sequence
// chunks on pp = world size, GPT-2 (tied) and Llama (untied, GQA, QK-norm), 20 steps:
// the same losses, gradient norms and final parameters; composed with DDP, FSDP and
// tp (+ sequence parallel) on 4 ranks; the activation ledger after a step equal to the
// memory model's prediction, with a unit's context about 1 / k of a 1F1B micro-batch's.
#include "../common/one_rank_mesh.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "core/memory.h"
#include "parallel/memory_model.h"
#include "parallel/pipeline/runner.h"
#include "report/pipeline_timeline.h"
#include "mpi_env.h"
#include "parity.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>

namespace ndt {
namespace {

using testing::expect_same_run;
using testing::train;
using testing::TrainedRun;

class Seq1F1BTest : public ::testing::Test {
 protected:
  Seq1F1BTest() { write_shard(dir_.file("train.bin"), testing::synthetic_text(30000, 13)); }
  // 4 micro-batches of 1 sequence of 16 tokens; 4 blocks.
  RunConfig run(bool llama, int steps) const {
    RunConfig c = testing::tiny_run(dir_.file("train.bin"), 4, 1);
    c.model.n_layer = 4;
    c.steps = steps;
    c.grad_clip = 0;  // a clip firing every step would hide a gradient off by a factor
    if (llama) testing::use_llama(c);
    return c;
  }
  static RunConfig seq1f1b(RunConfig c, int pp, int k) {
    c.mesh.pp = pp;
    c.pp_schedule = PipelineSchedule::seq1f1b;
    c.pp_seq_chunks = k;
    return c;
  }
  testing::TempDir dir_;
};

std::string what(bool llama, int pp, int k, const std::string& more = "") {
  return std::string(llama ? "llama" : "gpt2") + " seq1f1b pp=" + std::to_string(pp) + " k=" + std::to_string(k) +
         more;
}

// Catches: a chunk's attention missing the earlier chunks' keys (or seeing later ones),
// positions not offset by the chunk (learned positions, RoPE), earlier chunks' key and
// value gradients lost or added twice, a boundary tensor of the wrong sequence chunk,
// the loss normalised per chunk instead of per step.
TEST_F(Seq1F1BTest, MatchesOneRank) {
  Communicator& world = testing::world();
  for (bool llama : {false, true}) {
    const RunConfig c = run(llama, 20);
    const TrainedRun reference = train(c, testing::one_rank_mesh());
    for (int k : {2, 4}) {
      const RunConfig s = seq1f1b(c, world.size(), k);
      DeviceMesh mesh(world, s.resolve_mesh(world.size()));
      expect_same_run(reference, train(s, mesh), what(llama, world.size(), k).c_str());
    }
  }
}

// Catches: Seq1F1B's gradients reduced over data parallelism before every unit's
// backward has added to them (or twice), FSDP freeing a group while a later sequence
// chunk still needs it, tp ranks' K/V heads or sequence-parallel rows of the wrong
// chunk: pp=2 x DDP 2, pp=2 x FSDP 2 and pp=2 x tp=2 (with and without SP), k = 2.
TEST_F(Seq1F1BTest, ComposesWithDataAndTensorParallel) {
  Communicator& world = testing::world();
  if (world.size() != 4) GTEST_SKIP() << "needs 4 ranks";
  for (bool llama : {false, true}) {
    RunConfig c = run(llama, 10);
    c.micro_batch_size = 2;  // 1 micro-batch of 2 rows per dp rank; SP splits a chunk's rows over tp
    const TrainedRun reference = train(c, testing::one_rank_mesh());
    const RunConfig s = seq1f1b(c, 2, 2);
    {
      DeviceMesh mesh(world, s.resolve_mesh(4));  // pp=2 x dp=2
      expect_same_run(reference, train(s, mesh), what(llama, 2, 2, " x dp=2").c_str());
    }
    {
      RunConfig fsdp = s;
      fsdp.mesh.dp_shard = 2;
      fsdp.zero_stage = 3;
      DeviceMesh mesh(world, fsdp.resolve_mesh(4));
      expect_same_run(reference, train(fsdp, mesh), what(llama, 2, 2, " x FSDP 2").c_str());
    }
    for (bool sp : {false, true}) {
      RunConfig tp = s;
      tp.mesh.tp = 2;
      tp.sequence_parallel = sp;
      DeviceMesh mesh(world, tp.resolve_mesh(4));  // pp=2 x tp=2
      expect_same_run(reference, train(tp, mesh), what(llama, 2, 2, sp ? " x tp=2 + SP" : " x tp=2").c_str());
    }
  }
}

// Catches: contexts of whole micro-batches under Seq1F1B (no memory saved), chunks kept
// past their backward, a memory model that misses the key/value sums or the dropped
// attention probabilities. After one step the ledger holds exactly the prediction for
// the schedule's peak of units, and a unit's context is at most 1 / k of a 1F1B
// micro-batch's (the attention probabilities of a chunk are not kept at all).
TEST_F(Seq1F1BTest, ActivationsAreOneKthPerUnitAndEqualTheMemoryModel) {
  Communicator& world = testing::world();
  const int pp = world.size();
  for (int k : {1, 2, 4}) {
    RunConfig c = k == 1 ? run(false, 1) : seq1f1b(run(false, 1), pp, k);
    c.mesh.pp = pp;
    DeviceMesh mesh(world, c.resolve_mesh(pp));
    MemoryLedger& ledger = MemoryLedger::instance();
    const size_t before = ledger.current(MemTag::activations);
    Trainer trainer(c, mesh, nullptr);
    trainer.step();
    const int rank = mesh.coord(Axis::pp), m = 4;  // micro-batches of run()
    const PipelineShape shape{pp, 1, m, k};
    const int live = peak_live_contexts(pipeline_actions(c.pp_schedule, shape, rank));
    EXPECT_EQ(live, std::min(pp - rank + k - 1, m * k)) << "k " << k << " pp rank " << rank;
    EXPECT_EQ(trainer.pipeline()->peak_live_contexts(), live) << "k " << k << " pp rank " << rank;
    const std::vector<char>& units = trainer.model().local_units();
    const int64_t predicted =
        predict_pipeline_activation_bytes(c.model, 1, c.seq_len, c.loss_chunk_rows, {}, units, live, k);
    EXPECT_EQ(static_cast<int64_t>(ledger.current(MemTag::activations) - before), predicted)
        << "k " << k << " pp rank " << rank;
    ActivationLayout chunked;
    chunked.seq_chunks = k;
    const int64_t unit = context_floats(c.model, chunked, 1, c.seq_len / k, {}, units);
    const int64_t whole = context_floats(c.model, {}, 1, c.seq_len, {}, units);
    EXPECT_LE(unit * k, whole) << "k " << k;
    EXPECT_GE(unit * k, whole * 3 / 4) << "k " << k;
  }
}

// Catches: the measured timeline (pipeline_timeline.json, `ndtrain report`) losing the
// sequence chunk of each action, so Seq1F1B's units would be drawn as repeated
// micro-batches: every rank's gathered actions are its schedule's, in order.
TEST_F(Seq1F1BTest, MeasuredTimelineKeepsTheSequenceChunks) {
  Communicator& world = testing::world();
  RunConfig c = seq1f1b(run(false, 1), world.size(), 2);
  int32_t pid = static_cast<int32_t>(::getpid());
  world.broadcast(&pid, 1, DType::i32, 0);
  c.out_dir = "/tmp/ndt_seq1f1b_timeline_" + std::to_string(pid);  // rank 0 owns and writes it
  c.checkpoint_dir = "";
  c.save_on_exit = false;
  {
    DeviceMesh mesh(world, c.resolve_mesh(world.size()));
    Trainer trainer(c, mesh, nullptr);
    trainer.run();
  }
  if (world.rank() == 0) {
    const std::optional<MeasuredPipeline> measured = read_pipeline_timeline(c.out_dir + "/pipeline_timeline.json");
    ASSERT_TRUE(measured.has_value());
    const PipelineSimulation& s = measured->simulation;
    EXPECT_EQ(s.shape.seq_chunks, 2);
    ASSERT_EQ(static_cast<int>(s.timeline.size()), world.size());
    for (int r = 0; r < world.size(); ++r) {
      const std::vector<PipelineAction> expected = pipeline_actions(PipelineSchedule::seq1f1b, s.shape, r);
      ASSERT_EQ(s.timeline[static_cast<size_t>(r)].size(), expected.size()) << "rank " << r;
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_EQ(s.timeline[static_cast<size_t>(r)][i].action, expected[i]) << "rank " << r << " action " << i;
      }
    }
    std::filesystem::remove_all(c.out_dir);
  }
  world.barrier();
}

}  // namespace
}  // namespace ndt
