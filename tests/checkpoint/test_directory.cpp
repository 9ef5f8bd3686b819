#include "checkpoint/reader.h"
#include "../common/temp_dir.h"
#include "helpers.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

namespace ndt::ckpt {
namespace {

using ndt::testing::slice;
using ndt::testing::Standard;
using ndt::testing::TempDir;

TEST(CheckpointDirectory, Names) {
  EXPECT_EQ(checkpoint_dir_name(10), "step-00000010");
  EXPECT_EQ(checkpoint_dir_name(123456789), "step-123456789");
  TempDir root;
  EXPECT_EQ(make_tmp_checkpoint_dir(root.path(), 7), root.path() / "step-00000007.tmp");
  EXPECT_TRUE(std::filesystem::is_directory(root.path() / "step-00000007.tmp"));
}

TEST(CheckpointDirectory, LatestIgnoresUncommittedSaves) {
  TempDir root;
  EXPECT_FALSE(latest_checkpoint(root.path()));
  EXPECT_FALSE(latest_checkpoint(root.path() / "absent"));
  const Standard s;
  s.save(root.path(), 10);
  s.save(root.path(), 9);
  // A later save that wrote its data but never committed, and a stray directory.
  const std::filesystem::path tmp = make_tmp_checkpoint_dir(root.path(), 20);
  for (int rank = 0; rank < 2; ++rank) write_rank_file(tmp, rank, s.rank_blocks(rank));
  std::filesystem::create_directories(root.path() / "step-00000030");
  EXPECT_EQ(latest_checkpoint(root.path()), root.path() / "step-00000010");
}

TEST(CheckpointDirectory, PruneKeepsTheNewest) {
  TempDir root;
  const Standard s;
  for (int64_t step : {10, 20, 30, 40}) s.save(root.path(), step);
  make_tmp_checkpoint_dir(root.path(), 50);
  prune_checkpoints(root.path(), 2);
  EXPECT_FALSE(std::filesystem::exists(root.path() / "step-00000010"));
  EXPECT_FALSE(std::filesystem::exists(root.path() / "step-00000020"));
  EXPECT_TRUE(std::filesystem::exists(root.path() / "step-00000030"));
  EXPECT_TRUE(std::filesystem::exists(root.path() / "step-00000040"));
  EXPECT_FALSE(std::filesystem::exists(root.path() / "step-00000050.tmp"));
  EXPECT_EQ(latest_checkpoint(root.path()), root.path() / "step-00000040");
}

TEST(CheckpointDirectory, RemoveAfterKeepsUpToTheStep) {
  TempDir root;
  const Standard s;
  for (int64_t step : {10, 20, 30}) s.save(root.path(), step);
  make_tmp_checkpoint_dir(root.path(), 40);
  EXPECT_EQ(remove_checkpoints_after(root.path(), 20), 1);  // a run resumed from step 20
  EXPECT_EQ(latest_checkpoint(root.path()), root.path() / "step-00000020");
  EXPECT_FALSE(std::filesystem::exists(root.path() / "step-00000040.tmp"));
  EXPECT_EQ(remove_checkpoints_after(root.path(), -1), 2);  // a run starting afresh
  EXPECT_FALSE(latest_checkpoint(root.path()));
}

TEST(CheckpointDirectory, MakeTmpClearsALeftover) {
  TempDir root;
  const std::filesystem::path tmp = make_tmp_checkpoint_dir(root.path(), 10);
  write_rank_file(tmp, 3, Standard().rank_blocks(0));
  make_tmp_checkpoint_dir(root.path(), 10);
  EXPECT_TRUE(std::filesystem::is_empty(tmp));
}

// A crash mid-save (the writer's abort hook, in a forked child) leaves the previous
// checkpoint as the latest, and it still reads correctly.
TEST(CheckpointDirectory, CrashMidSaveKeepsThePreviousCheckpoint) {
  TempDir root;
  const Standard s;
  s.save(root.path(), 10);
  const std::filesystem::path tmp = make_tmp_checkpoint_dir(root.path(), 20);

  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setenv("NDT_CHECKPOINT_ABORT_AFTER_BYTES", "100", 1);
    try {
      write_rank_file(tmp, 0, s.rank_blocks(0));
    } catch (...) {
      std::_Exit(1);
    }
    std::_Exit(0);  // the hook did not fire
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 86);
  EXPECT_EQ(std::filesystem::file_size(tmp / "rank-00000.bin"), 100u);  // mid-file: w is 96 bytes
  EXPECT_FALSE(std::filesystem::exists(tmp / "index-rank-00000.json"));

  EXPECT_EQ(latest_checkpoint(root.path()), root.path() / "step-00000010");
  CheckpointReader reader(root.path() / "step-00000010");
  std::vector<float> out(6 * 8);
  reader.read_block("w", {6, 8}, {0, 0}, {6, 8}, out.data());
  EXPECT_EQ(out, s.w.values);
  std::vector<float> v(3 * 2);
  reader.read_block("v", {4, 6}, {1, 1}, {3, 2}, v.data());
  EXPECT_EQ(v, slice(s.v, {1, 1}, {3, 2}));
}

}  // namespace
}  // namespace ndt::ckpt
