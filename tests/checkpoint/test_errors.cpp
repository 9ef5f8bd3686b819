#include "checkpoint/checksum.h"
#include "checkpoint/reader.h"
#include "../common/errors.h"
#include "../common/temp_dir.h"
#include "helpers.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>

namespace ndt::ckpt {
namespace {

using ndt::testing::block_of;
using ndt::testing::expect_error;
using ndt::testing::read_bytes;
using ndt::testing::Standard;
using ndt::testing::TempDir;
using ndt::testing::write_bytes;

// Reads all of w, half of which lives in rank-00001.bin.
void read_w(const std::filesystem::path& dir) {
  CheckpointReader reader(dir);
  std::vector<float> out(6 * 8);
  reader.read_block("w", {6, 8}, {0, 0}, {6, 8}, out.data());
}

// --- reader ---

TEST(CheckpointErrors, MissingMetadata) {
  TempDir root;
  const std::filesystem::path tmp = make_tmp_checkpoint_dir(root.path(), 10);
  write_rank_file(tmp, 0, Standard().rank_blocks(0));
  expect_error([&] { CheckpointReader reader(tmp); }, {tmp.string(), "no metadata.json"});
}

TEST(CheckpointErrors, MalformedMetadata) {
  TempDir root;
  const std::filesystem::path dir = Standard().save(root.path(), 10);
  write_bytes((dir / "metadata.json").string(), "{\"format\": ");
  expect_error([&] { CheckpointReader reader(dir); }, {"metadata.json", "malformed"});
}

TEST(CheckpointErrors, MissingDataFile) {
  TempDir root;
  const std::filesystem::path dir = Standard().save(root.path(), 10);
  std::filesystem::remove(dir / "rank-00001.bin");
  expect_error([&] { read_w(dir); }, {"tensor w", (dir / "rank-00001.bin").string(), "missing"});
}

TEST(CheckpointErrors, TruncatedDataFile) {
  TempDir root;
  const std::filesystem::path dir = Standard().save(root.path(), 10);
  std::filesystem::resize_file(dir / "rank-00001.bin", 10);
  expect_error([&] { read_w(dir); }, {"tensor w", (dir / "rank-00001.bin").string(), "truncated",
                                      "10 bytes", "offset [3, 0]", "bytes [0, 96)"});
}

TEST(CheckpointErrors, ChecksumMismatch) {
  TempDir root;
  const std::filesystem::path dir = Standard().save(root.path(), 10);
  const std::string file = (dir / "rank-00000.bin").string();
  std::string bytes = read_bytes(file);
  const uint32_t stored = crc32c(bytes.data(), 96);  // w's chunk comes first
  bytes[5] ^= 0x01;
  write_bytes(file, bytes);
  const uint32_t computed = crc32c(bytes.data(), 96);
  expect_error([&] { read_w(dir); },
               {"checksum mismatch in tensor w, chunk at offset [0, 0] of file " + file,
                fmt::format("stored 0x{:08x}, computed 0x{:08x}", stored, computed)});
}

TEST(CheckpointErrors, BadRequests) {
  TempDir root;
  const std::filesystem::path dir = Standard().save(root.path(), 10);
  CheckpointReader reader(dir);
  std::vector<float> out(100);
  expect_error([&] { reader.read_block("nope", {6, 8}, {0, 0}, {1, 1}, out.data()); },
               {"unknown tensor nope", dir.string()});
  expect_error([&] { reader.logical_shape("nope"); }, {"unknown tensor nope"});
  expect_error([&] { reader.read_block("w", {6, 9}, {0, 0}, {1, 1}, out.data()); },
               {"tensor w", "logical shape [6, 9]", "logical shape [6, 8]"});
  expect_error([&] { reader.read_block("w", {6, 8}, {4, 0}, {3, 8}, out.data()); },
               {"tensor w", "offset [4, 0] shape [3, 8]", "outside", "[6, 8]"});
  expect_error([&] { reader.read_block("w", {6, 8}, {0}, {6}, out.data()); },
               {"tensor w", "outside"});
  expect_error([&] { reader.read_block("w", {6, 8}, {-1, 0}, {1, 8}, out.data()); },
               {"tensor w", "outside"});
}

// Metadata edited by hand so that rank 1's chunk of w is gone.
TEST(CheckpointErrors, RequestNotCovered) {
  TempDir root;
  const std::filesystem::path dir = Standard().save(root.path(), 10);
  nlohmann::json meta = nlohmann::json::parse(read_bytes((dir / "metadata.json").string()));
  meta["tensors"]["w"]["chunks"].erase(1);
  meta["metadata_crc32c"] = metadata_checksum(meta);  // an edit that keeps the checksum valid
  write_bytes((dir / "metadata.json").string(), meta.dump());
  expect_error([&] { read_w(dir); },
               {"tensor w", "cover 24 of the 48", "offset [0, 0] shape [6, 8]"});
}

// Catches: a metadata.json edited or damaged after the commit (a changed step, a
// removed checksum, a version-1 file) accepted silently.
TEST(CheckpointErrors, MetadataEditedAfterCommit) {
  TempDir root;
  const std::filesystem::path dir = Standard().save(root.path(), 10);
  const std::string path = (dir / "metadata.json").string();
  const std::string original = read_bytes(path);
  nlohmann::json meta = nlohmann::json::parse(original);
  meta["state"]["step"] = 20;
  write_bytes(path, meta.dump(1));
  expect_error([&] { CheckpointReader reader(dir); },
               {path, "changed or damaged after it was written", "its checksum is", "nothing was loaded"});
  meta = nlohmann::json::parse(original);
  meta.erase("metadata_crc32c");
  write_bytes(path, meta.dump());
  expect_error([&] { CheckpointReader reader(dir); }, {path, "has no metadata_crc32c"});
  meta["version"] = 1;
  write_bytes(path, meta.dump());
  expect_error([&] { CheckpointReader reader(dir); }, {path, "version 1", "before metadata checksums"});
  // Whitespace does not matter: the checksum is over the parsed content.
  write_bytes(path, nlohmann::json::parse(original).dump(4));
  EXPECT_NO_THROW(CheckpointReader reader(dir));
}

// --- commit ---

TEST(CheckpointErrors, CommitMissingRank) {
  TempDir root;
  const std::filesystem::path tmp = make_tmp_checkpoint_dir(root.path(), 10);
  write_rank_file(tmp, 0, Standard().rank_blocks(0));
  expect_error([&] { commit_checkpoint(tmp, root.path() / "step-00000010", 2, {}); },
               {"index-rank-00001.json is missing", "rank 1 of 2"});
  EXPECT_TRUE(std::filesystem::exists(tmp));
  EXPECT_FALSE(std::filesystem::exists(root.path() / "step-00000010"));
}

TEST(CheckpointErrors, CommitExtraRank) {
  TempDir root;
  const std::filesystem::path tmp = make_tmp_checkpoint_dir(root.path(), 10);
  for (int rank = 0; rank < 2; ++rank) write_rank_file(tmp, rank, Standard().rank_blocks(rank));
  expect_error([&] { commit_checkpoint(tmp, root.path() / "step-00000010", 1, {}); },
               {"index-rank-00001.json", "world size 1"});
}

// Two ranks save w with the given row ranges; the commit must refuse.
void expect_commit_error(int64_t rows0, int64_t start1, const std::vector<std::string>& parts) {
  TempDir root;
  const auto w = ndt::testing::make_tensor("w", {6, 8}, 0.0f);
  const std::filesystem::path tmp = make_tmp_checkpoint_dir(root.path(), 10);
  write_rank_file(tmp, 0, {block_of(w, {0, 0}, {rows0, 8})});
  write_rank_file(tmp, 1, {block_of(w, {start1, 0}, {6 - start1, 8})});
  expect_error([&] { commit_checkpoint(tmp, root.path() / "step-00000010", 2, {}); }, parts);
}

TEST(CheckpointErrors, CommitOverlappingChunks) {
  expect_commit_error(4, 3, {"tensor w", "offset [3, 0] shape [3, 8] in rank-00001.bin overlaps",
                             "offset [0, 0] shape [4, 8] in rank-00000.bin"});
}

TEST(CheckpointErrors, CommitGap) {
  expect_commit_error(3, 4, {"tensor w", "cover 40 of the 48 elements", "[6, 8]"});
}

// Empty blocks are listed in the index, so a tensor nobody actually wrote is caught.
TEST(CheckpointErrors, CommitTensorWithOnlyEmptyBlocks) {
  TempDir root;
  const auto e = ndt::testing::make_tensor("e", {4, 3}, 0.0f);
  const std::filesystem::path tmp = make_tmp_checkpoint_dir(root.path(), 10);
  write_rank_file(tmp, 0, {block_of(e, {0, 0}, {0, 3})});
  expect_error([&] { commit_checkpoint(tmp, root.path() / "step-00000010", 1, {}); },
               {"tensor e", "cover 0 of the 12 elements"});
}

TEST(CheckpointErrors, CommitLogicalShapesDisagree) {
  TempDir root;
  const std::filesystem::path tmp = make_tmp_checkpoint_dir(root.path(), 10);
  write_rank_file(tmp, 0, {block_of(ndt::testing::make_tensor("w", {6, 8}, 0.0f), {0, 0}, {3, 8})});
  write_rank_file(tmp, 1, {block_of(ndt::testing::make_tensor("w", {7, 8}, 0.0f), {3, 0}, {4, 8})});
  expect_error([&] { commit_checkpoint(tmp, root.path() / "step-00000010", 2, {}); },
               {"tensor w", "rank-00000.bin saves it as [6, 8]", "rank-00001.bin as [7, 8]"});
}

TEST(CheckpointErrors, CommitOntoExistingCheckpoint) {
  TempDir root;
  const std::filesystem::path dir = Standard().save(root.path(), 10);
  expect_error([&] { Standard().save(root.path(), 10); }, {dir.string(), "already exists"});
}

// --- writer ---

TEST(CheckpointErrors, WriterRejectsBadBlocks) {
  TempDir root;
  const auto w = ndt::testing::make_tensor("w", {6, 8}, 0.0f);
  TensorBlock short_data = block_of(w, {0, 0}, {3, 8});
  short_data.data.pop_back();
  expect_error([&] { write_rank_file(root.path(), 0, {short_data}); },
               {"tensor w", "holds 24 floats", "has 23"});
  TensorBlock outside = block_of(w, {0, 0}, {3, 8});
  outside.offset = {4, 0};
  expect_error([&] { write_rank_file(root.path(), 0, {outside}); },
               {"tensor w", "offset [4, 0] shape [3, 8]", "does not fit", "[6, 8]"});
}

}  // namespace
}  // namespace ndt::ckpt
