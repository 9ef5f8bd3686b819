#include "core/error.h"
#include "data/shard.h"
#include "../common/temp_dir.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace ndt {
namespace {

using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

// Builds a shard file by hand: header ints (rest zero) followed by raw token bytes.
std::string shard_bytes(int32_t magic, int32_t version, int32_t count, const std::string& body) {
  std::vector<int32_t> header(kShardHeaderInts, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::string out(reinterpret_cast<const char*>(header.data()), header.size() * sizeof(int32_t));
  return out + body;
}

// Runs read_shard expecting an ndt::Error whose message contains every one of `parts`.
void expect_read_error(const std::string& path, const std::vector<std::string>& parts) {
  try {
    read_shard(path);
    ADD_FAILURE() << "read_shard(" << path << ") did not throw";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const std::string& p : parts) {
      EXPECT_NE(msg.find(p), std::string::npos) << "message lacks '" << p << "': " << msg;
    }
  }
}

TEST(Shard, RoundTrip) {
  TempDir dir;
  std::vector<uint16_t> tokens = {0, 1, 255, 256, 50256, 65535, 7};
  write_shard(dir.file("a.bin"), tokens);
  EXPECT_EQ(read_shard(dir.file("a.bin")), tokens);
  // Large enough to matter, and the empty shard.
  std::vector<uint16_t> big(100003);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint16_t>(i * 2654435761u >> 7);
  write_shard(dir.file("big.bin"), big);
  EXPECT_EQ(read_shard(dir.file("big.bin")), big);
  write_shard(dir.file("empty.bin"), {});
  EXPECT_TRUE(read_shard(dir.file("empty.bin")).empty());
}

TEST(Shard, ExactLlmcLayout) {
  TempDir dir;
  write_shard(dir.file("a.bin"), {0x0102, 0xFFFE, 3});
  std::string bytes = read_bytes(dir.file("a.bin"));
  ASSERT_EQ(bytes.size(), 1024u + 6u);
  int32_t header[kShardHeaderInts];
  std::memcpy(header, bytes.data(), sizeof(header));
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 3);
  for (int i = 3; i < kShardHeaderInts; ++i) ASSERT_EQ(header[i], 0) << i;
  // Little-endian uint16 tokens right after the header.
  const unsigned char* t = reinterpret_cast<const unsigned char*>(bytes.data()) + 1024;
  EXPECT_EQ(t[0], 0x02);
  EXPECT_EQ(t[1], 0x01);
  EXPECT_EQ(t[2], 0xFE);
  EXPECT_EQ(t[3], 0xFF);
  EXPECT_EQ(t[4], 0x03);
  EXPECT_EQ(t[5], 0x00);
  // A hand-made file in the same layout reads back.
  write_bytes(dir.file("hand.bin"), shard_bytes(20240520, 1, 2, std::string("\x05\x00\x00\x01", 4)));
  EXPECT_EQ(read_shard(dir.file("hand.bin")), (std::vector<uint16_t>{5, 256}));
}

TEST(Shard, MissingFile) {
  TempDir dir;
  expect_read_error(dir.file("nope.bin"), {dir.file("nope.bin"), "does not exist"});
  expect_read_error(dir.path().string(), {dir.path().string(), "is a directory, not a file"});
}

TEST(Shard, ShorterThanHeader) {
  TempDir dir;
  write_bytes(dir.file("short.bin"), std::string(100, '\0'));
  expect_read_error(dir.file("short.bin"), {dir.file("short.bin"), "truncated", "100", "header"});
  write_bytes(dir.file("zero.bin"), "");
  expect_read_error(dir.file("zero.bin"), {dir.file("zero.bin"), "truncated", "0 bytes"});
}

TEST(Shard, BadMagic) {
  TempDir dir;
  write_bytes(dir.file("m.bin"), shard_bytes(12345, 1, 0, ""));
  expect_read_error(dir.file("m.bin"), {dir.file("m.bin"), "magic", "20240520", "12345"});
  // llm.c's checkpoint magic gets a hint.
  write_bytes(dir.file("ckpt.bin"), shard_bytes(20240326, 3, 0, ""));
  expect_read_error(dir.file("ckpt.bin"), {dir.file("ckpt.bin"), "magic", "20240326", "checkpoint"});
  // A text file is not a shard either.
  write_bytes(dir.file("text.bin"), std::string(2000, 'a'));
  expect_read_error(dir.file("text.bin"), {dir.file("text.bin"), "magic"});
}

TEST(Shard, UnsupportedVersion) {
  TempDir dir;
  write_bytes(dir.file("v.bin"), shard_bytes(20240520, 3, 0, ""));
  expect_read_error(dir.file("v.bin"), {dir.file("v.bin"), "version", "3"});
}

TEST(Shard, CountNotMatchingSize) {
  TempDir dir;
  // Header says 5 tokens (10 bytes), file has 3 tokens (6 bytes).
  write_bytes(dir.file("t.bin"), shard_bytes(20240520, 1, 5, std::string(6, '\1')));
  expect_read_error(dir.file("t.bin"), {dir.file("t.bin"), "5 tokens", "10 bytes", "6 bytes",
                                        "truncated"});
  // Header says 1 token, file has 4 bytes of tokens.
  write_bytes(dir.file("long.bin"), shard_bytes(20240520, 1, 1, std::string(4, '\1')));
  expect_read_error(dir.file("long.bin"), {dir.file("long.bin"), "1 tokens", "4 bytes", "trailing"});
  // Odd byte count.
  write_bytes(dir.file("odd.bin"), shard_bytes(20240520, 1, 2, std::string(3, '\1')));
  expect_read_error(dir.file("odd.bin"), {dir.file("odd.bin"), "3 bytes", "not a multiple of 2"});
  // Negative count.
  write_bytes(dir.file("neg.bin"), shard_bytes(20240520, 1, -4, ""));
  expect_read_error(dir.file("neg.bin"), {dir.file("neg.bin"), "-4"});
}

TEST(Shard, WriteToBadPathThrows) {
  TempDir dir;
  std::string path = dir.file("no/such/folder/a.bin");
  try {
    write_shard(path, {1, 2, 3});
    FAIL() << "expected ndt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ndt
