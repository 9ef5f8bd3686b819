// Training checkpoints under mpirun: exact resume on the same mesh (bit-identical
// losses and parameters), resharding (save on one mesh, resume on others: one rank,
// DDP, tp, FSDP), loads that must fail: a flipped byte, a missing file, a model that
// does not match; and commits that must wait for the slowest rank, made the slowest
// on purpose (NDT_CHECKPOINT_SLOW_RANK, checkpoint/writer.h) rather than left to luck:
// a sync save, an async save, and an async save still in flight when a stop
// (SIGTERM) is requested.
#include "../common/one_rank_mesh.h"
#include "../common/errors.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "mpi_env.h"
#include "parity.h"
#include "shared_dir.h"

#include "checkpoint/directory.h"
#include "checkpoint/reader.h"
#include "checkpoint/writer.h"
#include "interchange/hf_names.h"
#include "interchange/model_state.h"
#include "train/run_lock.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>

namespace ndt {
namespace {

using testing::SharedDir;
using testing::tiny_run;

struct Layout {
  int dp_shard = 1, tp = 1, zero_stage = 0;
  bool sequence_parallel = false;
  int cp = 1;
  const char* cp_mode = "ring";
};

class CheckpointResume : public ::testing::Test {
 protected:
  CheckpointResume() { write_shard(data_.file("train.bin"), testing::synthetic_text(30000, 6)); }
  RunConfig config(const Layout& l, const std::filesystem::path& dir) const {
    RunConfig c = tiny_run(data_.file("train.bin"), 8, 0);
    c.model.arch = Arch::llama;  // GQA, RoPE, QK-norm, untied output: every kind of parameter
    c.model.tied_embeddings = false;
    c.model.n_head = 8;
    c.model.n_kv_head = 4;
    c.model.d_ff = 96;
    c.model.qk_norm = true;
    c.mesh.dp_shard = l.dp_shard;
    c.mesh.tp = l.tp;
    c.zero_stage = l.zero_stage;
    c.sequence_parallel = l.sequence_parallel;
    c.mesh.cp = l.cp;
    c.cp_mode = cp_mode_from_name(l.cp_mode);
    c.checkpoint_dir = dir.string();
    return c;
  }
  // Steps [from, to) of a run (resuming from `resume` if set), saving at `to` if `save`.
  testing::TrainedRun train(RunConfig c, DeviceMesh& mesh, int64_t to, const std::string& resume, bool save,
                            bool async = false) const {
    c.resume = resume;
    Trainer trainer(c, mesh, nullptr);
    testing::TrainedRun run;
    while (trainer.steps_done() < to) run.losses.push_back(trainer.step().loss);
    if (save) trainer.save_checkpoint(async), trainer.finish_checkpoints();
    run.params = trainer.full_parameters();
    return run;
  }
  testing::TempDir data_;
};

void expect_close(const std::vector<double>& a, const std::vector<double>& b, size_t offset, const char* what) {
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_NEAR(b[i], a[offset + i], 1e-5 * std::fabs(a[offset + i])) << what << ": step " << offset + i;
  }
}

// A run's parameters alone, for expect_same_run without losses.
testing::TrainedRun params_only(const testing::TrainedRun& run) {
  testing::TrainedRun p;
  p.params = run.params;
  return p;
}

TEST_F(CheckpointResume, ExactOnTheSameMesh) {
  Communicator& world = testing::world();
  for (const Layout& l : {Layout{1, 1, 0}, Layout{world.size(), 1, 1}, Layout{world.size(), 1, 3},
                          Layout{1, world.size(), 0, true}}) {
    SharedDir dir(world);
    const RunConfig c = config(l, dir.path());
    DeviceMesh mesh(world, c.resolve_mesh(world.size()));
    const testing::TrainedRun straight = train(c, mesh, 20, "", false);
    train(c, mesh, 10, "", true, /*async=*/true);
    const testing::TrainedRun resumed = train(c, mesh, 20, "latest", false);
    ASSERT_EQ(resumed.losses.size(), 10u);
    for (size_t i = 0; i < 10; ++i) EXPECT_EQ(resumed.losses[i], straight.losses[10 + i]) << "step " << 10 + i;
    EXPECT_EQ(resumed.params, straight.params) << "zero stage " << l.zero_stage << ", tp " << l.tp;
  }
}

TEST_F(CheckpointResume, ReshardsOntoAnyMesh) {
  Communicator& world = testing::world();
  const int n = world.size();
  SharedDir dir(world);
  // The reference: one rank, 20 steps straight (every rank computes it alone).
  testing::TempDir own;
  const testing::TrainedRun reference = train(config({}, own.path()), testing::one_rank_mesh(), 20, "", false);
  // Saved by FSDP (stage 3) x tp: 2 x 2 on 4 ranks, tp = 2 on 2.
  const Layout saved = n == 4 ? Layout{2, 2, 3, true} : Layout{1, 2, 0};
  {
    const RunConfig c = config(saved, dir.path());
    DeviceMesh mesh(world, c.resolve_mesh(n));
    train(c, mesh, 10, "", true);
  }
  const std::string latest = "latest";
  const std::string saved_step = (dir.path() / ckpt::checkpoint_dir_name(10)).string();
  // One rank (each rank on its own: each its own run folder, as two runs may not share one).
  expect_close(reference.losses, train(config({}, own.path()), testing::one_rank_mesh(), 20, saved_step, false).losses, 10,
               "one rank");
  // Data parallel over 2 ranks (the world split in groups of 2, each group a run of its own).
  {
    std::unique_ptr<Communicator> pair = world.split(world.rank() / 2, world.rank(), "world");
    testing::TempDir pair_dir;
    RunConfig c = config({}, pair_dir.path());
    DeviceMesh mesh(*pair, c.resolve_mesh(2));
    expect_close(reference.losses, train(c, mesh, 20, saved_step, false).losses, 10, "dp=2");
  }
  // tp over all ranks, FSDP and ZeRO-1 over all ranks, and HSDP (FSDP over 2 x 2 replicas).
  for (const Layout& l : {Layout{1, n, 0}, Layout{n, 1, 3}, Layout{n, 1, 1}, Layout{2, 1, 3}}) {
    const RunConfig c = config(l, dir.path());
    DeviceMesh mesh(world, c.resolve_mesh(n));
    const testing::TrainedRun resumed = train(c, mesh, 20, latest, false);
    expect_close(reference.losses, resumed.losses, 10, ("tp=" + std::to_string(l.tp) + " zero stage " +
                                                        std::to_string(l.zero_stage)).c_str());
    testing::expect_same_run(params_only(reference), params_only(resumed), "resharded parameters");
  }
}

// Context parallelism leaves the saved state as it is: saved under cp = 2 (with FSDP
// sharding over dp_shard x cp on 4 ranks), resumed on one rank and under cp = world
// (ring with DDP, Ulysses with FSDP over cp).
// Catches: parameters replicated over cp saved by several ranks or none, shards over dp_shard x cp read into the wrong rows.
TEST_F(CheckpointResume, ReshardsAcrossContextParallelSizes) {
  Communicator& world = testing::world();
  const int n = world.size();
  SharedDir dir(world);
  testing::TempDir own;
  const testing::TrainedRun reference = train(config({}, own.path()), testing::one_rank_mesh(), 20, "", false);
  const Layout saved = n == 4 ? Layout{2, 1, 3, false, 2} : Layout{1, 1, 0, false, 2};
  {
    const RunConfig c = config(saved, dir.path());
    DeviceMesh mesh(world, c.resolve_mesh(n));
    train(c, mesh, 10, "", true);
  }
  const std::string saved_step = (dir.path() / ckpt::checkpoint_dir_name(10)).string();
  expect_close(reference.losses, train(config({}, own.path()), testing::one_rank_mesh(), 20, saved_step, false).losses, 10,
               "cp = 1, one rank");
  for (const Layout& l : {Layout{1, 1, 0, false, n}, Layout{1, 1, 3, false, n, "ulysses"}}) {
    const RunConfig c = config(l, dir.path());
    DeviceMesh mesh(world, c.resolve_mesh(n));
    const testing::TrainedRun resumed = train(c, mesh, 20, "latest", false);
    const std::string what = "cp = " + std::to_string(n) + " " + l.cp_mode;
    expect_close(reference.losses, resumed.losses, 10, what.c_str());
    testing::expect_same_run(params_only(reference), params_only(resumed), what.c_str());
  }
}

TEST_F(CheckpointResume, BadCheckpointsFailWithoutLoadingAnything) {
  testing::TempDir dir;  // one rank per process
  RunConfig c = config({}, dir.path());
  train(c, testing::one_rank_mesh(), 2, "", true);
  const std::filesystem::path saved = dir.path() / "step-00000002";
  auto error_of = [&](const RunConfig& run) -> std::string {
    try {
      Trainer trainer(run, testing::one_rank_mesh(), nullptr);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  c.resume = saved.string();
  RunConfig deeper = c;
  deeper.model.n_layer = 3;
  EXPECT_NE(error_of(deeper).find("model.n_layer = 2 in the checkpoint, 3 in this run"), std::string::npos)
      << error_of(deeper);

  // A flipped byte in the data file: the checksum names the tensor.
  const std::string file = (saved / "rank-00000.bin").string();
  std::string bytes = testing::read_bytes(file);
  bytes[100] ^= 0x40;
  testing::write_bytes(file, bytes);
  const std::string flipped = error_of(c);
  EXPECT_NE(flipped.find("checksum mismatch in tensor wte.weight"), std::string::npos) << flipped;
  EXPECT_NE(flipped.find("rank-00000.bin"), std::string::npos) << flipped;

  std::filesystem::remove(file);
  const std::string missing = error_of(c);
  EXPECT_NE(missing.find("rank-00000.bin"), std::string::npos) << missing;

  RunConfig none = c;
  none.resume = (dir.path() / "nothing").string();
  EXPECT_NE(error_of(none).find("checkpoint path " + none.resume + " does not exist"), std::string::npos)
      << error_of(none);
}

// Commits that must wait for every rank. Rank 1's writer sleeps kSlowMs before it
// writes its index (NDT_CHECKPOINT_SLOW_RANK), far longer than rank 0 needs to write
// its part, so a commit that does not wait for rank 1 finds its index missing every
// time (and fails) instead of in some runs only.
constexpr int kSlowRank = 1, kSlowMs = 500;

// Sets an environment variable on this rank for a scope (every rank runs the same
// test, so all set it). Declare it before the Trainer: the Trainer's destructor joins
// the writer thread, which reads the variable, before the variable goes.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) { ::setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

ScopedEnv slow_rank() {
  return ScopedEnv("NDT_CHECKPOINT_SLOW_RANK", std::to_string(kSlowRank) + ":" + std::to_string(kSlowMs));
}

// Checked on every rank once a save has returned: the checkpoint of `step` is committed.
void expect_committed(const std::filesystem::path& root, int64_t step) {
  const std::filesystem::path final_dir = root / ckpt::checkpoint_dir_name(step);
  EXPECT_TRUE(std::filesystem::exists(final_dir / "metadata.json")) << final_dir << " is not committed";
  EXPECT_FALSE(std::filesystem::exists(root / (ckpt::checkpoint_dir_name(step) + ".tmp"))) << "step " << step;
}

class CheckpointCommit : public CheckpointResume {
 protected:
  static constexpr int64_t kSteps = 8;
  // The layouts the commit tests run: DDP (each replicated parameter written by rank
  // i mod n) and FSDP (each rank its shards).
  static std::vector<Layout> layouts(int n) { return {Layout{1, 1, 0}, Layout{n, 1, 3}}; }
  // Resumes from the checkpoint of `step` and expects the uninterrupted run's losses and
  // parameters. With checkpoint.overwrite: resuming an older one deletes the later ones
  // (so callers go from the newest down).
  void expect_exact_resume(RunConfig c, DeviceMesh& mesh, const std::filesystem::path& root, int64_t step,
                           const testing::TrainedRun& straight) const {
    c.overwrite = true;
    const testing::TrainedRun resumed =
        train(c, mesh, kSteps, (root / ckpt::checkpoint_dir_name(step)).string(), false);
    ASSERT_EQ(resumed.losses.size(), static_cast<size_t>(kSteps - step)) << "resumed from step " << step;
    for (size_t i = 0; i < resumed.losses.size(); ++i) {
      EXPECT_EQ(resumed.losses[i], straight.losses[static_cast<size_t>(step) + i])
          << "resumed from step " << step << ": step " << step + static_cast<int64_t>(i);
    }
    EXPECT_EQ(resumed.params, straight.params) << "resumed from step " << step;
  }
};

TEST_F(CheckpointCommit, SyncSaveWaitsForTheSlowestRank) {
  Communicator& world = testing::world();
  for (const Layout& l : layouts(world.size())) {
    SCOPED_TRACE("zero stage " + std::to_string(l.zero_stage));
    SharedDir dir(world);
    const RunConfig c = config(l, dir.path());
    DeviceMesh mesh(world, c.resolve_mesh(world.size()));
    const testing::TrainedRun straight = train(c, mesh, kSteps, "", false);
    {
      const ScopedEnv slow = slow_rank();
      Trainer trainer(c, mesh, nullptr);
      while (trainer.steps_done() < 3) trainer.step();
      trainer.save_checkpoint(/*async=*/false);  // committed when it returns, rank 1's part included
      expect_committed(dir.path(), 3);
    }
    expect_exact_resume(c, mesh, dir.path(), 3, straight);
  }
}

TEST_F(CheckpointCommit, AsyncSaveWaitsForTheSlowestRank) {
  Communicator& world = testing::world();
  for (const Layout& l : layouts(world.size())) {
    SCOPED_TRACE("zero stage " + std::to_string(l.zero_stage));
    SharedDir dir(world);
    const RunConfig c = config(l, dir.path());
    DeviceMesh mesh(world, c.resolve_mesh(world.size()));
    const testing::TrainedRun straight = train(c, mesh, kSteps, "", false);
    {
      const ScopedEnv slow = slow_rank();
      Trainer trainer(c, mesh, nullptr);
      while (trainer.steps_done() < 3) trainer.step();
      trainer.save_checkpoint(/*async=*/true);
      trainer.step();  // training goes on while rank 1 still writes
      EXPECT_FALSE(std::filesystem::exists(dir.path() / ckpt::checkpoint_dir_name(3)));
      trainer.finish_checkpoints();  // commits once rank 1 is done too
      expect_committed(dir.path(), 3);
      // A second async save, waited for by the next save (which must commit it first).
      trainer.save_checkpoint(/*async=*/true);
      trainer.step();
      trainer.save_checkpoint(/*async=*/false);
      expect_committed(dir.path(), 4);
      expect_committed(dir.path(), 5);
    }
    expect_exact_resume(c, mesh, dir.path(), 5, straight);
    expect_exact_resume(c, mesh, dir.path(), 4, straight);
    expect_exact_resume(c, mesh, dir.path(), 3, straight);
  }
}

// The stop path: an async save is still in flight (rank 1 is slow) when a rank asks to
// stop (SIGTERM), so run()'s poll reports the stop without committing; run() then saves
// at exit, which first commits the save in flight. Both checkpoints must be committed
// and resume exactly. The stop request is cleared after each run, so later runs in this
// binary train to their end.
TEST_F(CheckpointCommit, StopWhileAnAsyncSaveIsInFlight) {
  Communicator& world = testing::world();
  install_stop_handler();
  for (const Layout& l : layouts(world.size())) {
    SCOPED_TRACE("zero stage " + std::to_string(l.zero_stage));
    SharedDir dir(world);
    RunConfig c = config(l, dir.path());
    c.steps = kSteps;
    c.checkpoint_every = 0;
    c.checkpoint_async = true;
    c.save_on_exit = true;
    DeviceMesh mesh(world, c.resolve_mesh(world.size()));
    const testing::TrainedRun straight = train(c, mesh, kSteps, "", false);
    {
      const ScopedEnv slow = slow_rank();
      Trainer trainer(c, mesh, nullptr);
      while (trainer.steps_done() < 3) trainer.step();
      trainer.save_checkpoint(/*async=*/true);  // rank 1 writes for kSlowMs more
      if (world.rank() == world.size() - 1) {  // one rank is asked to stop
        std::raise(SIGTERM);
        EXPECT_TRUE(stop_requested());
      }
      trainer.run();  // step 4, then the poll sees the stop: saves step 4 at exit
      clear_stop_request();
      EXPECT_EQ(trainer.steps_done(), 4);
      expect_committed(dir.path(), 3);
      expect_committed(dir.path(), 4);
    }
    expect_exact_resume(c, mesh, dir.path(), 4, straight);
    expect_exact_resume(c, mesh, dir.path(), 3, straight);
  }
}

// --- a run's life on several ranks (issue 11; the one-rank forms: tests/train/test_run_lifecycle.cpp) ---

// The message every rank throws from constructing a Trainer (empty: none).
std::string trainer_error(const RunConfig& c, DeviceMesh& mesh) {
  try {
    Trainer trainer(c, mesh, nullptr);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Catches: rank 0 of a DDP or ZeRO-1/2 job writing nearly the whole checkpoint (whole
// parameters assigned by index: rank 0 got every weight matrix, 98% of the bytes).
TEST_F(CheckpointResume, ReplicatedParametersAreWrittenInBalancedShares) {
  Communicator& world = testing::world();
  const int n = world.size();
  for (const Layout& l : {Layout{1, 1, 0}, Layout{n, 1, 1}, Layout{n, 1, 2}}) {
    SCOPED_TRACE("zero stage " + std::to_string(l.zero_stage));
    SharedDir dir(world);
    const RunConfig c = config(l, dir.path());
    DeviceMesh mesh(world, c.resolve_mesh(n));
    Trainer trainer(c, mesh, nullptr);
    trainer.save_checkpoint(/*async=*/false);
    std::vector<int64_t> bytes(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) bytes[static_cast<size_t>(r)] = std::filesystem::file_size(
        dir.path() / ckpt::checkpoint_dir_name(0) / ckpt::rank_file_name(r));
    const int64_t total = std::accumulate(bytes.begin(), bytes.end(), int64_t{0});
    // Greedy by size keeps every share within the largest parameter of the mean; here
    // within 10% (measured: at most 1.002 of the mean on 2 and 4 ranks; by index, rank 0
    // wrote 1.40 of the mean under DDP on 2 ranks).
    for (int r = 0; r < n; ++r) {
      EXPECT_LT(static_cast<double>(bytes[static_cast<size_t>(r)]), 1.1 * static_cast<double>(total) / n)
          << "rank " << r << " writes " << bytes[static_cast<size_t>(r)] << " of " << total << " bytes";
    }
  }
}

// Catches: a rank whose data file is missing reported on the other ranks only as
// "another rank could not read its part": every rank names the file and the reason.
TEST_F(CheckpointResume, AMissingRankFileIsNamedOnEveryRank) {
  Communicator& world = testing::world();
  SharedDir dir(world);
  RunConfig c = config(Layout{world.size(), 1, 3}, dir.path());  // FSDP: each rank reads its own rows
  DeviceMesh mesh(world, c.resolve_mesh(world.size()));
  train(c, mesh, 2, "", true);
  const std::filesystem::path file = dir.path() / ckpt::checkpoint_dir_name(2) / ckpt::rank_file_name(1);
  if (world.rank() == 0) std::filesystem::remove(file);
  world.barrier();
  c.resume = "latest";
  const std::string error = trainer_error(c, mesh);
  EXPECT_NE(error.find(file.string() + " is missing"), std::string::npos) << error;
  EXPECT_NE(error.find("nothing was loaded"), std::string::npos) << error;
}

// Catches: a second job on a folder in use (rank 0 sees the lock; the others must stop
// too, with the same message, not hang in the next collective).
TEST_F(CheckpointResume, AFolderInUseIsRefusedOnEveryRank) {
  Communicator& world = testing::world();
  SharedDir dir(world);
  const RunConfig c = config(Layout{}, dir.path());
  DeviceMesh mesh(world, c.resolve_mesh(world.size()));
  std::unique_ptr<RunFolderLock> held;
  if (world.rank() == 0) held = std::make_unique<RunFolderLock>(dir.path(), "a test");
  const std::string error = trainer_error(c, mesh);
  EXPECT_NE(error.find("rank 0: checkpoint.dir = \"" + dir.path().string() + "\" is in use by another run"),
            std::string::npos)
      << error;
  held.reset();
  world.barrier();
  EXPECT_EQ(trainer_error(c, mesh), "");
}

// Catches: init_from reaching only some parameters or rows on a sharded layout: on
// FSDP x tp (4 ranks) or tp (2 ranks) the run starts from exactly the file's weights.
TEST_F(CheckpointResume, InitFromGivesEveryLayoutExactlyTheFilesWeights) {
  Communicator& world = testing::world();
  SharedDir dir(world);
  const Layout layout = world.size() == 4 ? Layout{2, 2, 3, true} : Layout{1, world.size(), 0};
  RunConfig c = config(layout, dir.path() / "ckpt");
  Transformer source(c.model, /*seed=*/99);
  const std::string file = (dir.path() / "source.safetensors").string();
  if (world.rank() == 0) save_safetensors_hf(state_of(source), file);
  world.barrier();
  c.init_from = file;
  DeviceMesh mesh(world, c.resolve_mesh(world.size()));
  Trainer trainer(c, mesh, nullptr);
  const float* expected = source.store().values().data<float>();
  EXPECT_EQ(trainer.full_parameters(), std::vector<float>(expected, expected + source.store().numel()));
}

// Catches: a diverging job that goes on (or a rank that stops alone and leaves the
// others waiting): every rank stops at the same step with the same message, and no
// committed checkpoint holds a non-finite number.
TEST_F(CheckpointResume, NonFiniteStepStopsEveryRank) {
  Communicator& world = testing::world();
  for (const Layout& l : {Layout{1, 1, 0}, Layout{world.size(), 1, 3}}) {
    SCOPED_TRACE("zero stage " + std::to_string(l.zero_stage));
    SharedDir dir(world);
    RunConfig c = config(l, dir.path());
    c.steps = 40;
    c.schedule.max_lr = 1e6f;
    c.schedule.warmup_steps = 0;
    c.grad_clip = 0;
    c.checkpoint_every = 1;
    c.keep_last = 2;
    DeviceMesh mesh(world, c.resolve_mesh(world.size()));
    Trainer trainer(c, mesh, nullptr);
    std::string error;
    try {
      trainer.run();
    } catch (const Error& e) {
      error = e.what();
    }
    EXPECT_NE(error.find("so training cannot go on"), std::string::npos) << error;
    int32_t steps[2] = {static_cast<int32_t>(trainer.steps_done()), -static_cast<int32_t>(trainer.steps_done())};
    world.all_reduce(steps, 2, DType::i32, ReduceOp::max);
    EXPECT_EQ(steps[0], -steps[1]) << "every rank stops after the same step";
    for (int64_t step : ckpt::committed_steps(dir.path())) {
      ckpt::CheckpointReader reader(dir.path() / ckpt::checkpoint_dir_name(step));
      for (const std::string& name : reader.tensor_names()) {
        const Shape shape = reader.logical_shape(name);
        std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
        reader.read_block(name, shape, Shape(shape.size(), 0), shape, values.data());
        for (float v : values) ASSERT_TRUE(std::isfinite(v)) << "step " << step << ": " << name;
      }
    }
    EXPECT_EQ(ckpt::committed_steps(dir.path()).back(), trainer.steps_done());
  }
}

// The hook itself: malformed values are errors naming the variable and the value; a
// well-formed one delays only the rank it names.
TEST(CheckpointSlowRankHook, DelaysOnlyItsRankAndRefusesMalformedValues) {
  testing::TempDir dir;  // each rank its own
  const std::vector<ckpt::TensorBlock> blocks = {{"w", {2}, {0}, {2}, {1.0f, 2.0f}}};
  int n = 0;
  auto write = [&](int rank) { return ckpt::write_rank_file(dir.path() / std::to_string(n++), rank, blocks); };
  for (const char* bad : {"1", "1:", ":5", "x:5", "1:5ms", "-1:5", "1:-5", "1:5:5", " 1:5"}) {
    const ScopedEnv env("NDT_CHECKPOINT_SLOW_RANK", bad);
    testing::expect_error([&] { write(0); }, {std::string("NDT_CHECKPOINT_SLOW_RANK=") + bad});
  }
  {
    const ScopedEnv env("NDT_CHECKPOINT_SLOW_RANK", "3:300");
    auto t0 = std::chrono::steady_clock::now();
    write(3);
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(300)) << "rank 3 is the slow one";
    t0 = std::chrono::steady_clock::now();
    write(2);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(300)) << "rank 2 is not";
  }
}

}  // namespace
}  // namespace ndt
