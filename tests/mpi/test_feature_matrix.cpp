// The feature matrix (docs/testing.md): one table of layouts, every axis alone and
// their 2-D (4 ranks) and 3-D (8 ranks) combinations, with recompute and the zero-bubble
// schedule in some, each trained for 10 steps and
// checked against the one-rank run for loss, gradient-norm, MoE load-balancing loss,
// tokens-per-expert and parameter parity (parity.h), for both families. The model has
// a dense block and an MoE block (4 experts, top-2), so every layout runs both and the
// expert-parallel layouts have experts to split. Layouts ndtrain does not support are
// rows too: they must fail before training with an error naming the combination.
// GPT-2 runs with clipping off (grad_clip 0), Llama with a clip that never fires (1e3):
// a clip factor would hide a gradient off by a constant.
#include "../common/one_rank_mesh.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "layout.h"
#include "mpi_env.h"
#include "parity.h"
#include "plan/comm_model.h"
#include "plan/planner.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

namespace ndt {
namespace {

using testing::Layout;
using testing::mesh;
using testing::usp;

// Every axis alone and the 2-D combinations, on 4 ranks.
const std::vector<Layout>& four_rank_layouts() {
  static const std::vector<Layout> layouts = {
      {"ddp", mesh(1, 1, 1, 1, 1)},
      {"ddp, accumulation", mesh(1, 1, 1, 1, 1), 0, false, 1},
      {"zero1", mesh(1, 4, 1, 1, 1), 1},
      {"zero2", mesh(1, 4, 1, 1, 1), 2},
      {"fsdp", mesh(1, 4, 1, 1, 1), 3},
      {"fsdp, accumulation", mesh(1, 4, 1, 1, 1), 3, false, 1},
      {"hsdp (zero1)", mesh(1, 2, 1, 1, 1), 1},
      {"hsdp (fsdp)", mesh(1, 2, 1, 1, 1), 3},
      {"tp", mesh(1, 1, 1, 4, 1)},
      {"tp + sp", mesh(1, 1, 1, 4, 1), 0, true},
      {"ep", mesh(1, 4, 1, 1, 4)},
      {"cp", mesh(1, 1, 4, 1, 1)},
      {"usp (cp 2 x 2)", usp(mesh(1, 1, 4, 1, 1), 2)},
      {"pp x ddp", mesh(2, 1, 1, 1, 1), 0, false, 1},
      {"fsdp x tp", mesh(1, 2, 1, 2, 1), 3},
      {"fsdp x tp + sp", mesh(1, 2, 1, 2, 1), 3, true},
      {"fsdp x cp", mesh(1, 2, 2, 1, 1), 3},
      {"tp x cp", mesh(1, 1, 2, 2, 1)},
      {"ddp x ep (edp = 2)", mesh(1, 4, 1, 1, 2)},
      {"ep x tp + sp", mesh(1, 2, 1, 2, 2), 0, true},
      {"ep x cp (ep over cp)", mesh(1, 1, 2, 1, 2)},
      {"ep x ddp, accumulation", mesh(1, 2, 1, 1, 2), 0, false, 1},
      {"pp x fsdp", mesh(2, 2, 1, 1, 1), 3, false, 1},
      {"pp x tp", mesh(2, 1, 1, 2, 1), 0, false, 1},
      {"pp x ep", mesh(2, 2, 1, 1, 2), 0, false, 1},
      {"pp x cp", mesh(2, 1, 2, 1, 1), 0, false, 1},
      {"zero1 x ep", mesh(1, 4, 1, 1, 2), 1},
      {"zero2 x ep", mesh(1, 4, 1, 1, 2), 2},
      {"fsdp x ep", mesh(1, 4, 1, 1, 2), 3},
      {"hsdp x ep", mesh(1, 2, 1, 1, 2), 3},
      {"ddp, selective recompute", mesh(1, 1, 1, 1, 1), 0, false, 0, "", "1f1b", CheckpointMode::selective},
      {"fsdp x ep, full recompute", mesh(1, 4, 1, 1, 2), 3, false, 0, "", "1f1b", CheckpointMode::full},
      {"pp zero-bubble x ddp", mesh(2, 1, 1, 1, 1), 0, false, 1, "", "zb_h1"},
      {"pp zero-bubble x full recompute", mesh(2, 1, 1, 1, 1), 0, false, 1, "", "zb_h1", CheckpointMode::full},
      {"pp zero-bubble x selective recompute", mesh(2, 1, 1, 1, 1), 0, false, 1, "", "zb_h1",
       CheckpointMode::selective},
  };
  return layouts;
}

// 3-D combinations, on 8 ranks.
const std::vector<Layout>& eight_rank_layouts() {
  static const std::vector<Layout> layouts = {
      {"pp x fsdp x tp + sp", mesh(2, 2, 1, 2, 1), 3, true, 1},
      {"hsdp x tp", mesh(1, 2, 1, 2, 1), 3},
      {"cp x fsdp x tp + sp", mesh(1, 2, 2, 2, 1), 3, true},
      {"usp (2 x 2) x fsdp", usp(mesh(1, 2, 4, 1, 1), 2), 3},
      {"usp (2 x 2) x tp + sp", usp(mesh(1, 1, 4, 2, 1), 2), 0, true},
      {"dp x tp x ep", mesh(1, 2, 1, 2, 2)},
      {"pp x ep x tp", mesh(2, 2, 1, 2, 2), 0, false, 1},
      {"ep x cp x tp", mesh(1, 1, 2, 2, 2)},
      {"fsdp x ep x tp + sp", mesh(1, 4, 1, 2, 2), 3, true},
      {"pp x fsdp x ep", mesh(2, 4, 1, 1, 2), 3, false, 1},
      {"cp x fsdp x ep", mesh(1, 2, 2, 1, 2), 3},
  };
  return layouts;
}

RunConfig matrix_run(const std::string& train_file, bool llama) {
  RunConfig c = testing::moe_run(train_file, llama);
  c.steps = 10;
  c.model.moe_every = 2;  // block 0 dense, block 1 MoE
  return c;
}

// One step's counters of every mesh communicator and of the world, and the ledger's
// comm-tag peak, measured around the last step of a run.
struct StepMeasurement {
  std::array<CommStats, kNumAxes> before{}, axes{};
  CommStats world_before, world;
  size_t comm_peak = 0;
  size_t model_states = 0;  // the ledger's params, grads and optimizer after the step
};

testing::LastStepProbe measure_last_step(DeviceMesh& mesh, StepMeasurement& out) {
  testing::LastStepProbe probe;
  probe.before = [&mesh, &out] {
    for (size_t a = 0; a < kNumAxes; ++a) out.before[a] = mesh.axis(static_cast<Axis>(a)).stats();
    out.world_before = mesh.world().stats();
    MemoryLedger::instance().reset_peaks();
  };
  probe.after = [&mesh, &out] {
    const MemoryLedger& ledger = MemoryLedger::instance();
    out.comm_peak = ledger.peak(MemTag::comm);
    out.model_states = ledger.current(MemTag::params) + ledger.current(MemTag::grads) + ledger.current(MemTag::optimizer);
    auto delta = [](const CommStats& now, const CommStats& then) {
      CommStats d;
      for (size_t op = 0; op < kNumCommOps; ++op) {
        d.ops[op].calls = now.ops[op].calls - then.ops[op].calls;
        d.ops[op].payload_bytes = now.ops[op].payload_bytes - then.ops[op].payload_bytes;
        d.ops[op].wire_bytes = now.ops[op].wire_bytes - then.ops[op].wire_bytes;
      }
      return d;
    };
    for (size_t a = 0; a < kNumAxes; ++a) out.axes[a] = delta(mesh.axis(static_cast<Axis>(a)).stats(), out.before[a]);
    out.world = delta(mesh.world().stats(), out.world_before);
  };
  return probe;
}

// The measured step against the communication model for this rank's pipeline stage:
// calls, payload and wire bytes of every operation on every axis exactly, except the
// experts' all_to_all_v, whose received rows depend on the routing: its calls exactly on
// each rank and its payload summed over the ep group (what the group sends is what it
// receives; each rank's own token rows are exact), wire at most the payload. Collective
// over the ep group.
void expect_predicted_communication(const RunConfig& config, DeviceMesh& mesh, const StepMeasurement& measured,
                                    const std::string& what) {
  const StepCommunication predicted =
      predict_step_communication(config, mesh.world().size(), mesh.coord(Axis::pp));
  const std::string rank = fmt::format("{}, rank {}", what, mesh.world().rank());
  auto compare = [&](const CommStats& got, const AxisVolume& want, std::string_view axis) {
    for (size_t op = 0; op < kNumCommOps; ++op) {
      const CommCounter& g = got.ops[op];
      const OpVolume& w = want.ops[op];
      const std::string where = fmt::format("{}: {} on {}", rank, comm_op_name(static_cast<CommOp>(op)), axis);
      EXPECT_EQ(g.calls, w.calls) << where << ": calls";
      if (static_cast<CommOp>(op) == CommOp::all_to_all_v) {
        EXPECT_LE(g.wire_bytes, g.payload_bytes) << where;
        continue;
      }
      EXPECT_EQ(g.payload_bytes, w.payload_bytes) << where << ": payload bytes";
      EXPECT_EQ(g.wire_bytes, w.wire_bytes) << where << ": wire bytes";
    }
  };
  for (size_t a = 0; a < kNumAxes; ++a) compare(measured.axes[a], predicted.axes[a], axis_name(static_cast<Axis>(a)));
  compare(measured.world, predicted.world, "world");
  // all_to_all_v payload over the ep group (one all-reduce, after the measurement).
  // (Integers below 2^24: exact in f32.)
  std::array<float, 2> sums = {static_cast<float>(measured.axes[static_cast<size_t>(Axis::ep)][CommOp::all_to_all_v].payload_bytes),
                               static_cast<float>(predicted[Axis::ep][CommOp::all_to_all_v].payload_bytes)};
  mesh.axis(Axis::ep).all_reduce(sums.data(), sums.size(), DType::f32, ReduceOp::sum);
  EXPECT_EQ(sums[0], sums[1]) << rank << ": all_to_all_v payload summed over the ep group";
  // The planner (plan/planner.h) on the same layout: its model states for this rank's
  // stage are the ledger's, and for its worst stage its communication per axis is the
  // counters' (the experts' all_to_all_v aside: the ep axis's calls only). Memory and
  // bytes do not depend on the device: any profile with this many devices in a node.
  const Cluster cluster = make_cluster(builtin_device("a100-80g"), 1, mesh.world().size(), 0);
  const LayoutScore plan = score_layout(config, cluster);
  const int stage = mesh.coord(Axis::pp);
  const MemoryEstimate& states = plan.stages.at(static_cast<size_t>(stage));
  EXPECT_EQ(static_cast<int64_t>(measured.model_states), states.params + states.grads + states.optimizer)
      << rank << ": the planner's model states against the ledger";
  if (plan.worst_stage == stage) {
    for (size_t a = 0; a < kNumAxes; ++a) {
      int64_t calls = 0, payload = 0, wire = 0;
      for (const CommCounter& c : measured.axes[a].ops) calls += c.calls, payload += c.payload_bytes, wire += c.wire_bytes;
      const std::string where = fmt::format("{}: the planner's {} traffic", rank, axis_name(static_cast<Axis>(a)));
      EXPECT_EQ(plan.comm[a].calls, calls) << where;
      if (static_cast<Axis>(a) == Axis::ep) continue;
      EXPECT_EQ(plan.comm[a].payload_bytes, payload) << where;
      EXPECT_EQ(plan.comm[a].wire_bytes, wire) << where;
    }
  }
  // The ledger's comm tag: exact where what is allocated does not depend on timing or
  // routing (DDP in fp32, tp, cp, the pipeline's gradient copies); with ZeRO/FSDP buckets
  // and reduce-scatters are freed when a poll finds them done, and the experts' scratch
  // follows the routing, so there the prediction is the part every run holds at once: a
  // lower bound. Under ep the scratch is an expectation (balanced routing): not checked.
  const int64_t buffers = predict_comm_buffer_bytes(config, mesh.world().size(), mesh.coord(Axis::pp));
  if (mesh.size(Axis::ep) > 1) return;
  if (config.zero_stage == 0) {
    EXPECT_EQ(static_cast<int64_t>(measured.comm_peak), buffers) << rank << ": ledger comm peak";
  } else {
    EXPECT_GE(static_cast<int64_t>(measured.comm_peak), buffers) << rank << ": ledger comm peak";
  }
}

// Failed assertions of the running test so far.
int failures() {
  const ::testing::TestResult* result = ::testing::UnitTest::GetInstance()->current_test_info()->result();
  int failed = 0;
  for (int i = 0; i < result->total_part_count(); ++i) failed += result->GetTestPartResult(i).failed();
  return failed;
}

// Catches: any axis's reduction, sharding, routing or split wrong alone or only in
// combination (a constant factor too), for either family; an unsupported combination
// that trains anyway or fails without naming itself.
TEST(FeatureMatrix, EveryLayoutMatchesOneRankOrIsRefusedByName) {
  Communicator& world = testing::world();
  const int n = world.size();
  if (n != 4 && n != 8) GTEST_SKIP() << "the matrix runs on 4 and 8 ranks";
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 21));
  std::string table;
  for (bool llama : {false, true}) {
    const RunConfig base = matrix_run(dir.file("train.bin"), llama);
    const testing::TrainedRun reference = testing::train(base, testing::one_rank_mesh());
    for (const Layout& layout : n == 4 ? four_rank_layouts() : eight_rank_layouts()) {
      const RunConfig config = testing::with_layout(base, layout);
      const std::string what = fmt::format("{} {}", llama ? "llama" : "gpt2", layout.name);
      std::string outcome;
      if (*layout.refused) {
        try {
          DeviceMesh m(world, config.resolve_mesh(n));
          Trainer trainer(config, m, nullptr);
          ADD_FAILURE() << what << ": trained, but should be refused";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find(layout.refused), std::string::npos) << what << ": " << e.what();
          outcome = std::string("refused: ") + e.what();
        }
      } else {
        const int before = failures();
        DeviceMesh m(world, config.resolve_mesh(n));
        StepMeasurement step;
        const testing::LastStepProbe probe = measure_last_step(m, step);
        testing::expect_same_run(reference, testing::train(config, m, &probe), what.c_str());
        expect_predicted_communication(config, m, step, what);
        outcome = failures() > before ? "DIFFERS from one rank" : "matches one rank";
      }
      table += fmt::format("  {:<6} {:<24} {:<62} {}\n", llama ? "llama" : "gpt2", layout.name,
                           config.resolve_mesh(n).str() + (layout.zero_stage ? fmt::format(", zero {}", layout.zero_stage) : ""),
                           outcome);
    }
  }
  if (world.rank() == 0) fmt::print("feature matrix on {} ranks:\n{}", n, table);
}

}  // namespace
}  // namespace ndt
