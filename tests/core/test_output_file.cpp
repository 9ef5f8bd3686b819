// AtomicFile and AppendFile (core/output_file.h) on a full disk and an unwritable
// target, and input_file_problem (core/input_file.h) on each kind of bad input path.
#include "../common/errors.h"
#include "../common/full_disk.h"
#include "../common/temp_dir.h"
#include "core/input_file.h"
#include "core/output_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

namespace ndt {
namespace {

using testing::entries_of;
using testing::expect_error;
using testing::TempDir;

void write_atomically(const std::string& path, const std::string& content) {
  AtomicFile file(path);
  file.write(content.data(), content.size());
  file.commit();
}

// Catches: a commit that leaves the temporary behind or does not replace an old file.
TEST(AtomicFile, CommitReplacesThePathAndLeavesNoTemporary) {
  TempDir dir;
  write_atomically(dir.file("out.bin"), "old contents");
  write_atomically(dir.file("out.bin"), "new");
  EXPECT_EQ(testing::read_bytes(dir.file("out.bin")), "new");
  EXPECT_EQ(entries_of(dir.path()), std::set<std::string>{"out.bin"});
}

// Catches: a write abandoned by an exception (any error of the caller) leaving a
// partial file at the path.
TEST(AtomicFile, NotCommittedLeavesNothing) {
  TempDir dir;
  {
    AtomicFile file(dir.file("out.bin"));
    file.write("partial", 7);
  }
  EXPECT_TRUE(entries_of(dir.path()).empty());
}

// Catches: a full disk reported without the file or the reason, or leaving a partial
// file (final or temporary) that blocks a rerun.
TEST(AtomicFile, FullDiskIsAnErrorNamingTheFileAndLeavesNothing) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const std::vector<char> bytes(1 << 16, 'x');
  {
    testing::FullDisk full(4096);
    expect_error([&] {
      AtomicFile file(path);
      file.write(bytes.data(), bytes.size());
      file.commit();
    }, {path, "File too large"});
  }
  EXPECT_TRUE(entries_of(dir.path()).empty());
}

// Catches: an unwritable target (here one not even root can create) reported without
// the file or the reason.
TEST(AtomicFile, UnwritableTargetIsAnErrorNamingTheFile) {
  const std::string path = "/proc/ndtrain-test.safetensors";
  expect_error([&] { write_atomically(path, "x"); }, {"cannot create", path, "No such file or directory"});
  EXPECT_FALSE(std::filesystem::exists(path));
}

// Catches: a log write error (disk full) ignored, leaving a record cut in half.
TEST(AppendFile, WriteErrorIsAnErrorNamingTheFileAndTheReason) {
  AppendFile log("/dev/full", /*truncate=*/false);
  expect_error([&] { log.append("{\"step\": 1}\n"); }, {"writing /dev/full failed", "No space left on device"});
}

// Catches: appending that truncates, or truncating that appends.
TEST(AppendFile, AppendsOrTruncatesAsAsked) {
  TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  AppendFile(path, true).append("a\n");
  AppendFile(path, false).append("b\n");
  EXPECT_EQ(testing::read_bytes(path), "a\nb\n");
  AppendFile(path, true).append("c\n");
  EXPECT_EQ(testing::read_bytes(path), "c\n");
}

// Catches: a folder given where a file is meant reported as "does not exist".
TEST(InputFile, EachProblemIsNamed) {
  TempDir dir;
  testing::write_bytes(dir.file("data.bin"), "x");
  EXPECT_EQ(input_file_problem(dir.file("data.bin")), "");
  EXPECT_EQ(input_file_problem(dir.file("missing.bin")), "does not exist");
  EXPECT_EQ(input_file_problem(dir.path()), "is a directory, not a file");
  EXPECT_EQ(input_file_problem("/dev/null"), "is not a regular file");
  EXPECT_EQ(input_file_problem(dir.file("data.bin/inside")), "does not exist");
}

}  // namespace
}  // namespace ndt
