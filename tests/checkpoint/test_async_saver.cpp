#include "checkpoint/async_saver.h"
#include "../common/errors.h"
#include "../common/temp_dir.h"
#include "helpers.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace ndt::ckpt {
namespace {

using ndt::testing::expect_error;
using ndt::testing::read_bytes;
using ndt::testing::Standard;
using ndt::testing::TempDir;
using ndt::testing::write_bytes;

TEST(AsyncSaver, WritesTheSameFilesAsASynchronousSave) {
  TempDir root;
  const Standard s;
  AsyncSaver saver;
  EXPECT_TRUE(saver.done());
  saver.start(root.path() / "async", 1, s.rank_blocks(1));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!saver.done() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(saver.done());
  saver.wait();
  const int64_t expected_bytes = (24 + 16 + 36 + 6) * 4;  // rank 1's w, v, t3 and b
  EXPECT_EQ(saver.last_stats().bytes, expected_bytes);
  EXPECT_GE(saver.last_stats().seconds, 0.0);

  const WriteStats sync = saver.save_now(root.path() / "sync", 1, s.rank_blocks(1));
  EXPECT_EQ(sync.bytes, expected_bytes);
  for (const char* file : {"rank-00001.bin", "index-rank-00001.json"}) {
    EXPECT_EQ(read_bytes(root.file(std::string("async/") + file)),
              read_bytes(root.file(std::string("sync/") + file)))
        << file;
  }
}

// A second start waits for the first save; both end up complete on disk.
TEST(AsyncSaver, StartWaitsForTheSaveInFlight) {
  TempDir root;
  const Standard s;
  AsyncSaver saver;
  const std::filesystem::path tmp = root.path() / "step-00000010.tmp";
  saver.start(tmp, 0, s.rank_blocks(0));
  saver.start(tmp, 1, s.rank_blocks(1));
  saver.wait();
  EXPECT_TRUE(saver.done());
  EXPECT_GE(saver.blocked_seconds(), 0.0);
  commit_checkpoint(tmp, root.path() / "step-00000010", 2, {});
  EXPECT_EQ(latest_checkpoint(root.path()), root.path() / "step-00000010");
}

TEST(AsyncSaver, BackgroundErrorSurfacesFromWait) {
  TempDir root;
  write_bytes(root.file("file"), "not a directory");
  AsyncSaver saver;
  saver.start(root.path() / "file" / "ckpt", 0, Standard().rank_blocks(0));
  expect_error([&] { saver.wait(); }, {"cannot create checkpoint directory", "file/ckpt"});
  saver.wait();  // the error is reported once
  saver.start(root.path() / "ok", 0, Standard().rank_blocks(0));
  saver.wait();
  EXPECT_TRUE(std::filesystem::exists(root.path() / "ok" / "rank-00000.bin"));
}

}  // namespace
}  // namespace ndt::ckpt
