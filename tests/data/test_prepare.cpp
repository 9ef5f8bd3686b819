#include "core/error.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "../common/errors.h"
#include "../common/full_disk.h"
#include "../common/temp_dir.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

namespace ndt {
namespace {

using testing::expect_error;
using testing::TempDir;
using testing::write_bytes;

std::string shard_text(const std::string& path) {
  std::vector<uint16_t> tokens = read_shard(path);
  std::string s;
  for (uint16_t t : tokens) {
    EXPECT_LT(t, 256) << path;
    s.push_back(static_cast<char>(t));
  }
  return s;
}

TEST(Prepare, FolderOfThreeFiles) {
  TempDir dir;
  const std::string in = dir.file("in");
  // Written out of order; taken sorted by path, recursively.
  write_bytes(in + "/sub/c.txt", "xyz");
  write_bytes(in + "/b.txt", "bb");
  write_bytes(in + "/a.txt", "hello");
  // A symlink is not a regular file of its own: it would duplicate a.txt.
  std::filesystem::create_symlink("a.txt", in + "/a.u8");
  const std::string out = dir.file("out/nested");  // created if missing
  PrepareResult r = prepare_byte_shards(in, out, 0.25, false);
  // "hello\nbb\nxyz" is 12 bytes: the last 3 go to val.
  EXPECT_EQ(r.files, 3);
  EXPECT_EQ(r.train_tokens, 9);
  EXPECT_EQ(r.val_tokens, 3);
  EXPECT_EQ(r.train_path, out + "/train.bin");
  EXPECT_EQ(r.val_path, out + "/val.bin");
  EXPECT_EQ(shard_text(r.train_path), "hello\nbb\n");
  EXPECT_EQ(shard_text(r.val_path), "xyz");
}

TEST(Prepare, BinaryBytesAreTokens) {
  TempDir dir;
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  write_bytes(dir.file("all.bin"), bytes);
  PrepareResult r = prepare_byte_shards(dir.file("all.bin"), dir.file("out"), 0.5, false);
  EXPECT_EQ(r.files, 1);
  std::vector<uint16_t> train = read_shard(r.train_path), val = read_shard(r.val_path);
  ASSERT_EQ(train.size() + val.size(), 256u);
  EXPECT_EQ(val.size(), 128u);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(train[i], i);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(val[i], 128 + i);
}

TEST(Prepare, ExplicitListKeepsGivenOrder) {
  TempDir dir;
  write_bytes(dir.file("a"), "AAAA");
  write_bytes(dir.file("b"), "BBBB");
  write_bytes(dir.file("empty"), "");
  std::filesystem::create_symlink(dir.file("a"), dir.file("link"));  // links are fine in a list
  PrepareResult r = prepare_byte_shards(
      std::vector<std::string>{dir.file("b"), dir.file("empty"), dir.file("link")}, dir.file("o"),
      0.2, false);
  // "BBBB\n\nAAAA" = 10 bytes; round(2.0) = 2 bytes of val.
  EXPECT_EQ(r.files, 3);
  EXPECT_EQ(shard_text(r.train_path), "BBBB\n\nAA");
  EXPECT_EQ(shard_text(r.val_path), "AA");
}

TEST(Prepare, SplitSizesRound) {
  TempDir dir;
  write_bytes(dir.file("t"), std::string(1000, 'x'));
  PrepareResult r = prepare_byte_shards(dir.file("t"), dir.file("o1"), 0.1, false);
  EXPECT_EQ(r.val_tokens, 100);
  EXPECT_EQ(r.train_tokens, 900);
  // The smallest corpus: 2 tokens (an input and its target) on each side.
  write_bytes(dir.file("four"), "abcd");
  r = prepare_byte_shards(dir.file("four"), dir.file("o2"), 0.5, false);
  EXPECT_EQ(shard_text(r.train_path), "ab");
  EXPECT_EQ(shard_text(r.val_path), "cd");
}

// Catches: a corpus too small to train on accepted (a part of 0 or 1 token, which no
// row of inputs and targets can come from), or refused without the sizes.
TEST(Prepare, RefusesAPartOfFewerThanTwoTokens) {
  TempDir dir;
  write_bytes(dir.file("two"), "ab");
  expect_error([&] { prepare_byte_shards(dir.file("two"), dir.file("o"), 0.5, false); },
               {"too small", "2 bytes", "1 training and 1 validation tokens", "at least 2"});
  write_bytes(dir.file("ten"), "0123456789");
  expect_error([&] { prepare_byte_shards(dir.file("ten"), dir.file("o"), 0.01, false); },
               {"10 bytes", "val_fraction 0.01", "10 training and 0 validation tokens"});
  expect_error([&] { prepare_byte_shards(dir.file("ten"), dir.file("o"), 0.9, false); },
               {"1 training and 9 validation tokens"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("o")));
}

// Catches: existing shards (maybe another corpus's, maybe being read by a run)
// silently replaced.
TEST(Prepare, RefusesToOverwriteShardsUnlessAsked) {
  TempDir dir;
  write_bytes(dir.file("a"), "first corpus");
  write_bytes(dir.file("b"), "the second corpus");
  const PrepareResult first = prepare_byte_shards(dir.file("a"), dir.file("o"), 0.25, false);
  expect_error([&] { prepare_byte_shards(dir.file("b"), dir.file("o"), 0.25, false); },
               {first.train_path, first.val_path, "already exist", "--force"});
  EXPECT_EQ(shard_text(first.train_path) + shard_text(first.val_path), "first corpus");
  std::filesystem::remove(first.val_path);
  expect_error([&] { prepare_byte_shards(dir.file("b"), dir.file("o"), 0.25, false); },
               {first.train_path, "already exists"});
  const PrepareResult second = prepare_byte_shards(dir.file("b"), dir.file("o"), 0.25, true);
  EXPECT_EQ(shard_text(second.train_path) + shard_text(second.val_path), "the second corpus");
}

// Catches: a full disk leaving a partial train.bin that a rerun then refuses (or that
// training reads as a short corpus).
TEST(Prepare, FullDiskLeavesNoShard) {
  TempDir dir;
  write_bytes(dir.file("corpus"), std::string(100000, 'x'));
  std::filesystem::create_directories(dir.file("o"));
  {
    testing::FullDisk full(50000);
    expect_error([&] { prepare_byte_shards(dir.file("corpus"), dir.file("o"), 0.1, false); },
                 {dir.file("o/train.bin"), "File too large"});
  }
  EXPECT_TRUE(testing::entries_of(dir.file("o")).empty());
}

TEST(Prepare, Errors) {
  TempDir dir;
  write_bytes(dir.file("ok"), "some text to split in two");
  // Missing input.
  expect_error([&] { prepare_byte_shards(dir.file("missing"), dir.file("o"), 0.1, false); },
               {dir.file("missing"), "does not exist"});
  expect_error([&] {
    prepare_byte_shards(std::vector<std::string>{dir.file("ok"), dir.file("gone")}, dir.file("o"),
                        0.1, false);
  }, {dir.file("gone")});
  // Empty input: an empty file, a folder of empty files, a folder with no files, no list.
  write_bytes(dir.file("empty"), "");
  expect_error([&] { prepare_byte_shards(dir.file("empty"), dir.file("o"), 0.1, false); },
               {dir.file("empty"), "empty"});
  std::filesystem::create_directories(dir.file("nothing/sub"));
  expect_error([&] { prepare_byte_shards(dir.file("nothing"), dir.file("o"), 0.1, false); },
               {dir.file("nothing"), "no regular files"});
  expect_error([&] { prepare_byte_shards(std::vector<std::string>{}, dir.file("o"), 0.1, false); },
               {"empty"});
  // A folder given in an explicit list.
  expect_error([&] {
    prepare_byte_shards(std::vector<std::string>{dir.file("nothing")}, dir.file("o"), 0.1, false);
  }, {dir.file("nothing"), "is a directory, not a file"});
  // val_fraction outside (0, 1).
  for (double f : {0.0, 1.0, -0.5, 1.5}) {
    expect_error([&] { prepare_byte_shards(dir.file("ok"), dir.file("o"), f, false); },
                 {"val_fraction", fmt::format("{}", f)});
  }
  expect_error([&] { prepare_byte_shards(dir.file("ok"), dir.file("o"), std::nan(""), false); },
               {"val_fraction", "nan"});
  // Output folder that cannot be created (a file is in the way).
  expect_error([&] { prepare_byte_shards(dir.file("ok"), dir.file("ok/out"), 0.1, false); },
               {dir.file("ok/out")});
  // Nothing was written by the failed calls.
  EXPECT_FALSE(std::filesystem::exists(dir.file("o")));
}

}  // namespace
}  // namespace ndt
