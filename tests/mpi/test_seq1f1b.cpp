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
#include "mpi_env.h"
#include "parity.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ndt
