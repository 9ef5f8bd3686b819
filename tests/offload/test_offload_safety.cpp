// What offload does when the disk misbehaves, and what it leaves behind: a damaged swap
// chunk and a full disk (a real tmpfs) during a step stop the run with the file named,
// nothing saved from the half-updated state, and the last checkpoint intact and
// resumable; checkpoints are the same bytes with and without offload, so a run resumes
// across the two either way exactly; a swap folder belongs to one run.
#include "../train/run_error.h"
#include "../common/temp_dir.h"
#include "../common/tmpfs.h"
#include "checkpoint/directory.h"
#include "checkpoint/checkpoint.h"
#include "offload_runs.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>

namespace ndt {
namespace {

namespace fs = std::filesystem;

using testing::run_error;

class OffloadSafety : public ::testing::Test {
 protected:
  OffloadSafety() { write_shard(dir_.file("train.bin"), testing::synthetic_text(20000, 8)); }
  // stage-3 training to 6 steps, checkpoints in dir/<run>/checkpoints
  RunConfig run(const std::string& name, bool offload, const std::string& swap) const {
    RunConfig c = testing::offload_run(dir_.file("train.bin"), 3, offload, offload, swap);
    c.steps = 6;
    c.out_dir = dir_.file(name);
    c.checkpoint_async = false;
    c.eval_batches = 1;
    return c;
  }
  // Resumes `c`'s latest checkpoint in memory and trains to its end: each step's loss and
  // the final parameters must be those of an in-memory run that never stopped.
  void expect_resumes_exactly(RunConfig c, int64_t from) const {
    c.offload_optimizer = c.offload_params = false;
    c.resume = "latest";
    testing::TrainedRun resumed;
    {
      Trainer t(c, testing::one_rank_mesh(), nullptr);
      ASSERT_EQ(t.steps_done(), from);
      while (t.steps_done() < c.steps) resumed.losses.push_back(t.step().loss);
      resumed.params = t.full_parameters();
    }
    RunConfig straight = run("straight", false, "");
    const testing::TrainedRun reference = testing::train(straight, testing::one_rank_mesh());
    for (size_t i = 0; i < resumed.losses.size(); ++i) {
      EXPECT_EQ(resumed.losses[i], reference.losses[from + i]) << "resumed step " << from + i + 1;
    }
    EXPECT_EQ(resumed.params, reference.params) << "final parameters after resuming";
  }
  testing::TempDir dir_;
};

void flip_byte(const fs::path& file, int64_t offset) {
  const int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << file;
  char byte = 0;
  ASSERT_EQ(::pread(fd, &byte, 1, offset), 1);
  byte = static_cast<char>(byte ^ 0x10);
  ASSERT_EQ(::pwrite(fd, &byte, 1, offset), 1);
  ::fsync(fd);
  ::close(fd);
}

// Catches: a swap chunk changed behind the run's back trained on silently, an error that
// does not name the file and chunk, or a stop that saves the half-updated state over the
// good checkpoint.
TEST_F(OffloadSafety, ADamagedSwapChunkStopsTheRunNamingItAndTheIntactCheckpoint) {
  const RunConfig c = run("damaged", true, dir_.file("swap"));
  const fs::path moments = fs::path(dir_.file("swap")) / "rank-00000" / "exp_avg.swap";
  std::string error;
  {
    Trainer t(c, testing::one_rank_mesh(), nullptr);
    t.step(), t.step();
    t.save_checkpoint(/*async=*/false);
    flip_byte(moments, 100);
    error = run_error(t);
  }
  EXPECT_MENTIONS(error, "step 3 of 6: offload: swap file " + moments.string() + " is damaged: chunk 0 (bytes 0 to 16384)");
  const fs::path saved = fs::path(c.out_dir) / "checkpoints" / ckpt::checkpoint_dir_name(2);
  EXPECT_MENTIONS(error, "without saving (the states on disk may hold part of this step's update); the last checkpoint, " + saved.string() + ", is intact");
  EXPECT_EQ(ckpt::latest_checkpoint(fs::path(c.out_dir) / "checkpoints"), saved);
  EXPECT_FALSE(fs::exists(moments)) << "the swap files go with the stopped run";
  expect_resumes_exactly(c, 2);
}

// Catches: a full disk in the middle of a step (here the gradient shards' first write)
// ending the run without naming the file and the cause, or leaving anything but the last
// committed checkpoint as the newest.
TEST_F(OffloadSafety, AFullDiskDuringAStepStopsTheRunWithTheCheckpointIntact) {
  testing::Tmpfs disk(8u << 20);
  if (!disk.mounted()) GTEST_SKIP() << disk.reason();
  const RunConfig memory = run("full", false, "");
  {
    Trainer t(memory, testing::one_rank_mesh(), nullptr);
    t.step(), t.step();
    t.save_checkpoint(/*async=*/false);
  }
  RunConfig c = run("full", true, disk.path().string());
  c.resume = "latest";
  std::string error;
  {
    Trainer t(c, testing::one_rank_mesh(), nullptr);  // the swap files are recreated from step 2
    std::ofstream filler(disk.path() / "filler", std::ios::binary);
    const std::vector<char> block(1 << 16, 'x');
    while (filler.write(block.data(), static_cast<std::streamsize>(block.size())) && filler.flush()) {
    }
    filler.close();
    error = run_error(t);
  }
  EXPECT_MENTIONS(error, "step 3 of 6: offload: writing chunk");
  EXPECT_MENTIONS(error, (disk.path() / "rank-00000" / "grads.swap").string());
  EXPECT_MENTIONS(error, "No space left on device (the disk holding offload.dir is full)");
  const fs::path saved = fs::path(c.out_dir) / "checkpoints" / ckpt::checkpoint_dir_name(2);
  EXPECT_MENTIONS(error, "the last checkpoint, " + saved.string() + ", is intact: continue with --resume");
  fs::remove(disk.path() / "filler");
  EXPECT_EQ(ckpt::latest_checkpoint(fs::path(c.out_dir) / "checkpoints"), saved);
  expect_resumes_exactly(c, 2);
}

// Catches: a checkpoint format that depends on where the states lived (a run with offload
// that only a run with offload can resume), or a resume that recreates the swap files
// from the wrong slices.
TEST_F(OffloadSafety, CheckpointsAreTheSameBytesSoRunsResumeAcrossOffload) {
  RunConfig memory = run("memory", false, ""), offloaded = run("offloaded", true, dir_.file("swap"));
  for (RunConfig* c : {&memory, &offloaded}) {
    Trainer t(*c, testing::one_rank_mesh(), nullptr);
    t.step(), t.step(), t.step();
    t.save_checkpoint(/*async=*/false);
  }
  const fs::path a = fs::path(memory.out_dir) / "checkpoints" / ckpt::checkpoint_dir_name(3);
  const fs::path b = fs::path(offloaded.out_dir) / "checkpoints" / ckpt::checkpoint_dir_name(3);
  EXPECT_EQ(testing::read_bytes((a / ckpt::rank_file_name(0)).string()),
            testing::read_bytes((b / ckpt::rank_file_name(0)).string()))
      << "the data file of a checkpoint saved with the states on disk";
  const auto tensors = [](const fs::path& dir) {
    return nlohmann::json::parse(testing::read_bytes((dir / ckpt::kMetadataFile).string())).at("tensors");
  };
  EXPECT_EQ(tensors(a), tensors(b)) << "every chunk, offset and checksum";
  // The offloaded run's checkpoint resumes in memory, the in-memory one's with offload.
  expect_resumes_exactly(offloaded, 3);
  memory.resume = "latest";
  memory.offload_optimizer = memory.offload_params = true;
  memory.offload_dir = dir_.file("swap2");
  const testing::TrainedRun reference = testing::train(run("reference", false, ""), testing::one_rank_mesh());
  Trainer t(memory, testing::one_rank_mesh(), nullptr);
  for (int64_t s = 3; s < memory.steps; ++s) EXPECT_EQ(t.step().loss, reference.losses[s]) << "step " << s + 1;
  EXPECT_EQ(t.full_parameters(), reference.params);
}

// Catches: train.init_from writing the weights into memory the offloaded run no longer
// reads (its parameter shards live on disk).
TEST_F(OffloadSafety, InitFromWritesTheWeightsIntoTheSwapFiles) {
  const RunConfig source = run("source", false, "");
  std::vector<float> weights;
  {
    Trainer t(source, testing::one_rank_mesh(), nullptr);
    t.step(), t.step();
    t.save_checkpoint(/*async=*/false);
    weights = t.full_parameters();
  }
  RunConfig c = run("fine-tune", true, dir_.file("swap"));
  c.init_from = source.out_dir;
  Trainer t(c, testing::one_rank_mesh(), nullptr);
  EXPECT_EQ(t.full_parameters(), weights);
}

// Catches: two runs sharing swap files (each would read the other's chunks as damaged, or
// worse, as its own).
TEST_F(OffloadSafety, ASwapFolderBelongsToOneRun) {
  const RunConfig first = run("first", true, dir_.file("swap"));
  RunConfig second = run("second", true, dir_.file("swap"));
  Trainer t(first, testing::one_rank_mesh(), nullptr);
  try {
    Trainer other(second, testing::one_rank_mesh(), nullptr);
    ADD_FAILURE() << "a second run took the swap folder";
  } catch (const Error& e) {
    EXPECT_MENTIONS(e.what(), "offload.dir = \"" + (fs::path(dir_.file("swap")) / "rank-00000").string() +
                                  "\" is in use by another run");
  }
  t.step();  // the first run's files are untouched
}

}  // namespace
}  // namespace ndt
