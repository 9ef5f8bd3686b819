// Pipeline parallelism against one rank: every schedule (GPipe, 1F1B, interleaved 1F1B,
// ZB-H1, and ZB-V and DualPipeV on the V placement) on pp = world size, GPT-2 (tied
// embeddings: the first and the last stage hold the table; rank 0 alone under the V)
// and Llama (untied, GQA, QK-norm): the same losses, gradient norms and final
// parameters; composed with DDP, ZeRO-1/2/3 and tp + SP on 4 ranks, and pp x FSDP x tp
// on 8; the activation memory the
// schedule implies (GPipe m contexts, 1F1B at most pp - rank); the bytes sent on pp;
// a checkpoint saved under pp resumed on one rank.
#include "../common/one_rank_mesh.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "core/memory.h"
#include "parallel/pipeline/runner.h"
#include "parallel/pipeline/schedule.h"
#include "mpi_env.h"
#include "parity.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace ndt {
namespace {

using testing::expect_same_run;
using testing::tiny_run;
using testing::train;
using testing::TrainedRun;

class PipelineTest : public ::testing::Test {
 protected:
  PipelineTest() { write_shard(dir_.file("train.bin"), testing::synthetic_text(30000, 11)); }
  // 8 micro-batches of 1 sequence; 8 blocks (interleaving 4 ranks x 2 needs 7).
  RunConfig run(bool llama) const {
    RunConfig c = tiny_run(dir_.file("train.bin"), 8, 1);
    c.model.n_layer = 8;
    c.steps = 20;
    c.grad_clip = 0;  // a clip firing every step would hide a gradient off by a factor
    if (llama) testing::use_llama(c);
    return c;
  }
  testing::TempDir dir_;
};

struct Schedule {
  const char* name;
  int virtual_stages;
};
constexpr Schedule kSchedules[] = {{"gpipe", 1},         {"1f1b", 1}, {"interleaved_1f1b", 2},
                                   {"zb_h1", 1},         {"zb_v", 2}, {"dualpipev", 2}};
constexpr const char* kVSchedules[] = {"zb_v", "dualpipev"};

// Catches: a boundary tensor sent to the wrong stage or micro-batch, a tied embedding
// whose two copies drift apart (gradients not summed between the first and the last
// stage), a loss or gradient norm that misses a stage, a schedule losing or repeating
// a micro-batch.
TEST_F(PipelineTest, EveryScheduleMatchesOneRank) {
  Communicator& world = testing::world();
  for (const auto& [llama, tied] : {std::pair{false, true}, {true, false}, {true, true}}) {
    RunConfig c = run(llama);
    c.model.tied_embeddings = tied;
    const TrainedRun reference = train(c, testing::one_rank_mesh());
    for (const Schedule& s : kSchedules) {
      const std::string what = std::string(llama ? "llama " : "gpt2 ") + (tied ? "tied " : "") + s.name +
                               " pp=" + std::to_string(world.size());
      c.mesh.pp = world.size();
      c.pp_schedule = pipeline_schedule_from_name(s.name);
      c.pp_virtual_stages = s.virtual_stages;
      DeviceMesh mesh(world, c.resolve_mesh(world.size()));
      expect_same_run(reference, train(c, mesh), what.c_str());
    }
  }
}

// Catches: the z-loss term missing from a pipeline run's reports (only the stage with the
// head computes it; the runner sums it over pp with the loss), or summed wrongly.
TEST_F(PipelineTest, ZLossIsReportedLikeOneRank) {
  Communicator& world = testing::world();
  RunConfig c = run(false);
  c.steps = 3;
  c.z_loss = 1e-3f;
  std::vector<double> reference;
  {
    Trainer trainer(c, testing::one_rank_mesh(), nullptr);
    while (trainer.steps_done() < c.steps) reference.push_back(trainer.step().z_loss);
  }
  c.mesh.pp = world.size();
  DeviceMesh mesh(world, c.resolve_mesh(world.size()));
  Trainer trainer(c, mesh, nullptr);
  for (double z : reference) {
    ASSERT_GT(z, 0);
    EXPECT_NEAR(trainer.step().z_loss, z, 1e-5 * z) << "pp=" << world.size();
  }
}

// Catches: pipeline gradients not reduced over data parallelism (or reduced twice, or
// reduce-scattered while another micro-batch still adds to them), a tied embedding's
// copies summed in mismatched shards, tp boundary tensors of the wrong rows under
// sequence parallel.
TEST_F(PipelineTest, ComposesWithDataAndTensorParallel) {
  Communicator& world = testing::world();
  if (world.size() != 4) GTEST_SKIP() << "needs 4 ranks";
  for (bool llama : {false, true}) {
    RunConfig c = run(llama);
    c.steps = 10;
    const TrainedRun reference = train(c, testing::one_rank_mesh());
    c.mesh.pp = 2;
    {
      DeviceMesh mesh(world, c.resolve_mesh(4));  // pp=2 x dp=2
      expect_same_run(reference, train(c, mesh), llama ? "llama pp=2 x dp=2" : "gpt2 pp=2 x dp=2");
    }
    // pp=2 x ZeRO-1/2/3 over dp_shard=2 (FSDP with the zero-bubble schedule, whose split
    // backward interleaves micro-batches' gradients most).
    for (const auto& [stage, schedule] : {std::pair{1, "1f1b"}, {2, "1f1b"}, {3, "zb_h1"}}) {
      RunConfig zero = c;
      zero.mesh.dp_shard = 2;
      zero.zero_stage = stage;
      zero.pp_schedule = pipeline_schedule_from_name(schedule);
      DeviceMesh mesh(world, zero.resolve_mesh(4));
      const std::string what = std::string(llama ? "llama" : "gpt2") + " pp=2 x ZeRO-" + std::to_string(stage) + " " +
                               schedule;
      expect_same_run(reference, train(zero, mesh), what.c_str());
    }
    // The V placement (rank 0 holds the embedding and the head) under DDP, FSDP and tp + SP.
    for (const char* schedule : kVSchedules) {
      RunConfig v = c;
      v.pp_schedule = pipeline_schedule_from_name(schedule);
      v.pp_virtual_stages = 2;
      for (const auto& [dp, fsdp, tp] : {std::tuple{2, 1, 1}, {1, 2, 1}, {1, 1, 2}}) {
        RunConfig layout = v;
        layout.mesh.dp_shard = fsdp;
        layout.zero_stage = fsdp > 1 ? 3 : 0;
        layout.mesh.tp = tp;
        layout.sequence_parallel = tp > 1;
        layout.micro_batch_size = tp > 1 ? 2 : 1;
        DeviceMesh mesh(world, layout.resolve_mesh(4));
        const std::string what = std::string(llama ? "llama" : "gpt2") + " pp=2 " + schedule +
                                 (dp > 1 ? " x dp=2" : fsdp > 1 ? " x FSDP dp_shard=2" : " x tp=2 + SP");
        expect_same_run(reference, train(layout, mesh), what.c_str());
      }
    }
    c.mesh.tp = 2;
    c.micro_batch_size = 2;  // sequence parallel splits a micro-batch's tokens over tp
    for (bool sp : {false, true}) {
      c.sequence_parallel = sp;
      DeviceMesh mesh(world, c.resolve_mesh(4));  // pp=2 x tp=2
      const std::string what = std::string(llama ? "llama" : "gpt2") + " pp=2 x tp=2" + (sp ? " + SP" : "");
      expect_same_run(reference, train(c, mesh), what.c_str());
    }
  }
}

// Catches: the axes failing to compose: pp=2 x FSDP (ZeRO-3, dp_shard=2) x tp=2 with
// sequence parallel on 8 ranks (registered as its own CTest, mpi_8_ranks_pipeline).
TEST_F(PipelineTest, ThreeDimensionalLayoutOnEightRanks) {
  Communicator& world = testing::world();
  if (world.size() != 8) GTEST_SKIP() << "needs 8 ranks";
  for (bool llama : {false, true}) {
    RunConfig c = run(llama);
    c.steps = 6;
    c.micro_batch_size = 2;  // 2 micro-batches per data-parallel rank; SP splits each over tp
    const TrainedRun reference = train(c, testing::one_rank_mesh());
    c.mesh.pp = 2;
    c.mesh.dp_shard = 2;
    c.mesh.tp = 2;
    c.zero_stage = 3;
    c.sequence_parallel = true;
    DeviceMesh mesh(world, c.resolve_mesh(8));
    expect_same_run(reference, train(c, mesh), llama ? "llama pp=2 x fsdp=2 x tp=2" : "gpt2 pp=2 x fsdp=2 x tp=2");
    if (llama) continue;
    c.pp_schedule = PipelineSchedule::dualpipev;  // the V placement in the 3D layout
    c.pp_virtual_stages = 2;
    DeviceMesh v_mesh(world, c.resolve_mesh(8));
    expect_same_run(reference, train(c, v_mesh), "gpt2 pp=2 dualpipev x fsdp=2 x tp=2");
  }
}

// Catches: a runner keeping every micro-batch's activations whatever the schedule (or
// freeing them early), and a memory model that does not count a stage's own units.
TEST_F(PipelineTest, ActivationsFollowTheSchedule) {
  Communicator& world = testing::world();
  const int pp = world.size();
  RunConfig c = run(false);
  c.mesh.pp = pp;
  const int m = 8;
  for (const auto& [schedule, v] :
       {std::pair{"gpipe", 1}, {"1f1b", 1}, {"interleaved_1f1b", 2}, {"zb_v", 2}, {"dualpipev", 2}}) {
    c.pp_schedule = pipeline_schedule_from_name(schedule);
    c.pp_virtual_stages = v;
    DeviceMesh mesh(world, c.resolve_mesh(pp));
    MemoryLedger& ledger = MemoryLedger::instance();
    const size_t before = ledger.current(MemTag::activations);
    Trainer trainer(c, mesh, nullptr);
    trainer.step();
    const int rank = mesh.coord(Axis::pp);
    // GPipe m, 1F1B pp - rank; two chunks per rank (interleaved, the V schedules): the
    // rule the planner uses (a micro-batch's context from its first chunk's forward to
    // its last backward), more than pairs / v.
    const int live = std::string(schedule) == "gpipe"  ? m
                     : std::string(schedule) == "1f1b" ? std::min(m, pp - rank)
                                                       : peak_live_contexts(pipeline_actions(
                                                             c.pp_schedule, pipeline_shape(c.pp_schedule, pp, v, m),
                                                             rank));
    EXPECT_EQ(trainer.pipeline()->peak_live_contexts(), live) << schedule << " on pp rank " << rank;
    const std::vector<char>& units = trainer.model().local_units();
    const ActivationLayout tp;
    const int64_t context = context_floats(c.model, tp, 1, c.seq_len, {}, units) * 4;
    const int64_t workspace = workspace_floats(c.model, tp, 1, c.seq_len, c.loss_chunk_rows) * 4;
    // The trainer's own (empty) context and the runner's pool of `live` contexts.
    EXPECT_EQ(static_cast<int64_t>(ledger.current(MemTag::activations) - before), live * context + workspace)
        << schedule << " on pp rank " << rank;
  }
}

// Catches: a metrics record without the pipeline's measured bubble or pp traffic.
TEST_F(PipelineTest, MetricsCarryTheBubbleAndPpTraffic) {
  Communicator& world = testing::world();
  RunConfig c = run(false);
  c.mesh.pp = world.size();
  c.steps = 2;
  int32_t pid = static_cast<int32_t>(::getpid());
  world.broadcast(&pid, 1, DType::i32, 0);
  c.out_dir = "/tmp/ndt_pipeline_metrics_" + std::to_string(pid);  // rank 0 owns and writes it
  c.checkpoint_dir = "";
  c.save_on_exit = false;
  {
    DeviceMesh mesh(world, c.resolve_mesh(world.size()));
    Trainer trainer(c, mesh, nullptr);
    trainer.step();
  }
  if (world.rank() == 0) {
    std::ifstream in(c.out_dir + "/metrics.jsonl");
    std::string line;
    ASSERT_TRUE(std::getline(in, line)) << "no metrics record";
    const nlohmann::json record = nlohmann::json::parse(line);
    ASSERT_TRUE(record.contains("pp_bubble")) << line;
    EXPECT_GE(record["pp_bubble"].get<double>(), 0.0);
    EXPECT_LT(record["pp_bubble"].get<double>(), 1.0);
    EXPECT_GT(record["comm"]["pp"]["send"]["wire_bytes"].get<int64_t>(), 0) << line;
    std::filesystem::remove_all(c.out_dir);
  }
  world.barrier();
}

// Catches: boundary tensors sent more often, or larger, than the schedule needs.
TEST_F(PipelineTest, BytesOnPpAreTheBoundaryTensors) {
  Communicator& world = testing::world();
  const int pp = world.size();
  RunConfig c = run(false);
  c.mesh.pp = pp;
  c.eval_every = 0;
  for (const Schedule& s : kSchedules) {
    c.pp_schedule = pipeline_schedule_from_name(s.name);
    c.pp_virtual_stages = s.virtual_stages;
    DeviceMesh mesh(world, c.resolve_mesh(pp));
    Trainer trainer(c, mesh, nullptr);
    mesh.axis(Axis::pp).stats() = {};
    trainer.step();
    // Every boundary between chunks on different ranks carries each micro-batch's
    // activation forward and its gradient backward: [seq_len, d_model] floats each. In a
    // loop pp x v - 1 boundaries; in a V 2 pp - 2 (chunks pp - 1 and pp share rank pp - 1).
    const CommStats& stats = mesh.axis(Axis::pp).stats();
    int32_t sent = static_cast<int32_t>(stats[CommOp::send].payload_bytes);
    world.all_reduce(&sent, 1, DType::i32, ReduceOp::sum);
    const bool v_placement = pipeline_placement(c.pp_schedule) == PipelinePlacement::v;
    const int64_t boundaries = v_placement ? 2 * pp - 2 : int64_t{pp} * s.virtual_stages - 1, m = 8;
    EXPECT_EQ(sent, 2 * boundaries * m * c.seq_len * c.model.d_model * 4) << s.name;
  }
}

// Catches: a pipeline checkpoint missing a stage's parameters or moments, or holding the
// tied embedding twice; resumed on one rank, and on 4 ranks also as pp=4 and pp=2 x tp=2.
TEST_F(PipelineTest, CheckpointSavedUnderPpResumesOnOneRank) {
  Communicator& world = testing::world();
  testing::TempDir own;  // each rank's one-rank reference
  RunConfig c = run(false);
  c.steps = 10;
  c.checkpoint_dir = own.file("reference");
  const TrainedRun reference = train(c, testing::one_rank_mesh());
  // Under pp = world size: 5 steps, saved (rank 0 names the shared folder).
  int32_t pid = static_cast<int32_t>(::getpid());
  world.broadcast(&pid, 1, DType::i32, 0);
  const std::string folder = "/tmp/ndt_pipeline_ckpt_" + std::to_string(pid);
  RunConfig piped = c;
  piped.mesh.pp = world.size();
  piped.checkpoint_dir = folder;
  piped.overwrite = true;
  {
    DeviceMesh mesh(world, piped.resolve_mesh(world.size()));
    Trainer trainer(piped, mesh, nullptr);
    while (trainer.steps_done() < 5) trainer.step();
    trainer.save_checkpoint(/*async=*/false);
  }
  world.barrier();
  RunConfig resumed = c;
  resumed.checkpoint_dir = own.file("resumed");
  resumed.resume = folder + "/step-00000005";
  Trainer trainer(resumed, testing::one_rank_mesh(), nullptr);
  std::vector<double> losses;
  while (trainer.steps_done() < 10) losses.push_back(trainer.step().loss);
  for (size_t i = 0; i < losses.size(); ++i) {
    EXPECT_NEAR(losses[i], reference.losses[5 + i], 1e-5 * reference.losses[5 + i]) << "step " << 5 + i;
  }
  // On 4 ranks, also resumed as pp=4 and as pp=2 x tp=2.
  if (world.size() == 4) {
    for (const auto& [pp, tp] : {std::pair{4, 1}, {2, 2}}) {
      RunConfig other = piped;
      other.mesh.pp = pp;
      other.mesh.tp = tp;
      other.checkpoint_dir = folder + "_" + std::to_string(pp);
      other.resume = folder + "/step-00000005";
      DeviceMesh mesh(world, other.resolve_mesh(4));
      Trainer resumed_on(other, mesh, nullptr);
      for (int s = 5; s < 10; ++s) {
        const double loss = resumed_on.step().loss;
        EXPECT_NEAR(loss, reference.losses[static_cast<size_t>(s)], 1e-5 * reference.losses[static_cast<size_t>(s)])
            << "pp=" << pp << " tp=" << tp << ", step " << s;
      }
    }
  }
  world.barrier();
  if (world.rank() == 0) {
    for (const char* suffix : {"", "_4", "_2"}) std::filesystem::remove_all(folder + suffix);
  }
}

}  // namespace
}  // namespace ndt
