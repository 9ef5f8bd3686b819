// Faults at awkward moments on one rank (docs/checkpoints.md): a metrics file that
// stops accepting writes mid-run, and a rollback whose checkpoint turns out damaged.
// Each saves the finite state it has and stops with an error that says what happened,
// instead of ending without a save (or, worse, going on). The signals' forms run the
// binary: tests/launch/test_stop_signals.cpp.
#include "run_error.h"
#include "../common/full_disk.h"
#include "../common/one_rank_mesh.h"
#include "../mpi/parity.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/directory.h"
#include "data/shard.h"
#include "test_support.h"
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace ndt {
namespace {

namespace fs = std::filesystem;

using testing::run_error;

class RunFaults : public ::testing::Test {
 protected:
  RunFaults() { write_shard(dir_.file("train.bin"), testing::synthetic_text(30000, 21)); }
  testing::TempDir dir_;
};

// A model small enough that its checkpoint (about 12 bytes a parameter, under 40 KB)
// fits the file-size limit below while metrics.jsonl (about 1 KB a step) outgrows it.
RunConfig small_state_run(const std::string& train) {
  RunConfig c = testing::tiny_run(train, 4, 0);
  c.model.n_layer = 1;
  c.model.d_model = 8;
  c.model.n_head = 2;
  c.model.d_ff = 16;
  return c;
}

// Catches: a metrics write failure that ends the run without saving (the old way: the
// error escaped the loop), or one that is ignored and the run exits 0 with its metrics cut.
TEST_F(RunFaults, AMetricsFileThatCannotBeWrittenSavesAndStops) {
  RunConfig c = small_state_run(dir_.file("train.bin"));
  c.steps = 200;
  c.out_dir = dir_.file("run");
  c.checkpoint_async = false;
  Trainer trainer(c, testing::one_rank_mesh(), nullptr);
  std::string error;
  {
    testing::FullDisk full(40000);  // the checkpoint fits; metrics.jsonl fills up after some tens of steps
    error = run_error(trainer);
  }
  EXPECT_MENTIONS(error, dir_.file("run") + "/metrics.jsonl");
  EXPECT_MENTIONS(error, "the run stops rather than train on with its metrics cut");
  const int64_t step = trainer.steps_done();
  EXPECT_GT(step, 5);
  EXPECT_LT(step, c.steps) << "the run stopped at the failure, not at the end";
  const fs::path saved = fs::path(c.out_dir) / "checkpoints" / ckpt::checkpoint_dir_name(step);
  EXPECT_MENTIONS(error, "The state after step " + std::to_string(step) + " is saved in " + saved.string());
  EXPECT_EQ(ckpt::latest_checkpoint(fs::path(c.out_dir) / "checkpoints"), saved);
  EXPECT_MENTIONS(error, "resume with --resume once");
}

// Flips a byte in the middle of a checkpoint's rank file (its checksum then fails).
void damage(const fs::path& checkpoint) {
  const fs::path file = checkpoint / ckpt::rank_file_name(0);
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(fs::file_size(file) / 2));
  char byte = 0;
  f.read(&byte, 1);
  f.seekp(static_cast<std::streamoff>(fs::file_size(file) / 2));
  byte = static_cast<char>(byte ^ 0x5a);
  f.write(&byte, 1);
}

// Catches: a rollback meeting a damaged checkpoint that stops with a bare checksum error
// (not saying a rollback was in progress) and without saving the finite state it had.
TEST_F(RunFaults, ARollbackToADamagedCheckpointSavesTheFiniteStateAndSaysSo) {
  RunConfig c = testing::tiny_run(dir_.file("train.bin"), 8, 0);
  c.steps = 30;
  c.checkpoint_every = 5;
  c.checkpoint_dir = dir_.file("ckpt");
  c.checkpoint_async = false;
  c.corrupt_batches = "22:1";
  c.on_spike = SpikeAction::rollback;
  c.spike.window = 16;
  c.spike.zscore = 3;
  c.spike.min_increase = 0.2;
  Trainer trainer(c, testing::one_rank_mesh(), nullptr);
  while (trainer.steps_done() < 20) trainer.step();
  trainer.save_checkpoint(/*async=*/false);
  const fs::path newest = fs::path(c.checkpoint_dir) / ckpt::checkpoint_dir_name(20);
  damage(newest);
  while (trainer.steps_done() < 22) trainer.step();
  std::string error;
  try {
    trainer.step();  // batch 22: the spike, and the rollback to step 20
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_MENTIONS(error, "step 23: loss ");
  EXPECT_MENTIONS(error, "a rollback to " + newest.string() + " was in progress and failed");
  EXPECT_MENTIONS(error, "checksum");
  const fs::path saved = fs::path(c.checkpoint_dir) / ckpt::checkpoint_dir_name(22);
  EXPECT_MENTIONS(error, "The state after step 22 (before the spike) is saved in " + saved.string());
  EXPECT_EQ(ckpt::latest_checkpoint(c.checkpoint_dir), saved);
}

}  // namespace
}  // namespace ndt
