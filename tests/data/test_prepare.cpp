#include "core/error.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "../common/errors.h"
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
  PrepareResult r = prepare_byte_shards(in, out, 0.25);
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
  PrepareResult r = prepare_byte_shards(dir.file("all.bin"), dir.file("out"), 0.5);
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
      0.1);
  // "BBBB\n\nAAAA" = 10 bytes; round(1.0) = 1 byte of val.
  EXPECT_EQ(r.files, 3);
  EXPECT_EQ(shard_text(r.train_path), "BBBB\n\nAAA");
  EXPECT_EQ(shard_text(r.val_path), "A");
}

TEST(Prepare, SplitSizesRoundAndKeepBothNonEmpty) {
  TempDir dir;
  write_bytes(dir.file("t"), std::string(1000, 'x'));
  PrepareResult r = prepare_byte_shards(dir.file("t"), dir.file("o1"), 0.1);
  EXPECT_EQ(r.val_tokens, 100);
  EXPECT_EQ(r.train_tokens, 900);
  // Tiny inputs still give at least one token to each side.
  write_bytes(dir.file("two"), "ab");
  r = prepare_byte_shards(dir.file("two"), dir.file("o2"), 0.001);
  EXPECT_EQ(shard_text(r.train_path), "a");
  EXPECT_EQ(shard_text(r.val_path), "b");
  r = prepare_byte_shards(dir.file("two"), dir.file("o3"), 0.999);
  EXPECT_EQ(r.train_tokens, 1);
  EXPECT_EQ(r.val_tokens, 1);
}

TEST(Prepare, Errors) {
  TempDir dir;
  write_bytes(dir.file("ok"), "some text");
  // Missing input.
  expect_error([&] { prepare_byte_shards(dir.file("missing"), dir.file("o"), 0.1); },
               {dir.file("missing"), "does not exist"});
  expect_error([&] {
    prepare_byte_shards(std::vector<std::string>{dir.file("ok"), dir.file("gone")}, dir.file("o"),
                        0.1);
  }, {dir.file("gone")});
  // Empty input: an empty file, a folder of empty files, a folder with no files, no list.
  write_bytes(dir.file("empty"), "");
  expect_error([&] { prepare_byte_shards(dir.file("empty"), dir.file("o"), 0.1); },
               {dir.file("empty"), "empty"});
  std::filesystem::create_directories(dir.file("nothing/sub"));
  expect_error([&] { prepare_byte_shards(dir.file("nothing"), dir.file("o"), 0.1); },
               {dir.file("nothing"), "no regular files"});
  expect_error([&] { prepare_byte_shards(std::vector<std::string>{}, dir.file("o"), 0.1); },
               {"empty"});
  // A folder given in an explicit list.
  expect_error([&] {
    prepare_byte_shards(std::vector<std::string>{dir.file("nothing")}, dir.file("o"), 0.1);
  }, {dir.file("nothing"), "not a regular file"});
  // val_fraction outside (0, 1).
  for (double f : {0.0, 1.0, -0.5, 1.5}) {
    expect_error([&] { prepare_byte_shards(dir.file("ok"), dir.file("o"), f); },
                 {"val_fraction", fmt::format("{}", f)});
  }
  expect_error([&] { prepare_byte_shards(dir.file("ok"), dir.file("o"), std::nan("")); },
               {"val_fraction", "nan"});
  // Output folder that cannot be created (a file is in the way).
  expect_error([&] { prepare_byte_shards(dir.file("ok"), dir.file("ok/out"), 0.1); },
               {dir.file("ok/out")});
  // Nothing was written by the failed calls.
  EXPECT_FALSE(std::filesystem::exists(dir.file("o")));
}

}  // namespace
}  // namespace ndt
