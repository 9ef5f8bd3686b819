#include "checkpoint/reader.h"
#include "../common/temp_dir.h"
#include "helpers.h"

#include <gtest/gtest.h>

#include <fstream>

namespace ndt::ckpt {
namespace {

using ndt::testing::TempDir;
using ndt::testing::FullTensor;
using ndt::testing::slice;
using ndt::testing::Standard;

std::vector<float> read(CheckpointReader& reader, const FullTensor& t, const Shape& offset,
                        const Shape& shape) {
  std::vector<float> out(static_cast<size_t>(shape_numel(shape)), -999.0f);
  reader.read_block(t.name, t.shape, offset, shape, out.data());
  return out;
}

// Saved on two ranks, read back with other splits: every element must come back exactly.
TEST(CheckpointRoundTrip, ReadsAnyOtherSplit) {
  TempDir root;
  const Standard s;
  CheckpointReader reader(s.save(root.path(), 10));

  // w was split by rows: read it as three column blocks and as an interior box.
  const std::vector<std::pair<int64_t, int64_t>> columns = {{0, 3}, {3, 3}, {6, 2}};
  for (const auto& [col, width] : columns) {
    EXPECT_EQ(read(reader, s.w, {0, col}, {6, width}), slice(s.w, {0, col}, {6, width}));
  }
  EXPECT_EQ(read(reader, s.w, {1, 2}, {4, 5}), slice(s.w, {1, 2}, {4, 5}));
  // v was split by columns: read it by rows.
  EXPECT_EQ(read(reader, s.v, {0, 0}, {2, 6}), slice(s.v, {0, 0}, {2, 6}));
  EXPECT_EQ(read(reader, s.v, {2, 0}, {2, 6}), slice(s.v, {2, 0}, {2, 6}));
  EXPECT_EQ(read(reader, s.v, {1, 1}, {2, 4}), slice(s.v, {1, 1}, {2, 4}));
  // t3 was split along dim 2: read along dim 0 and an interior box.
  EXPECT_EQ(read(reader, s.t3, {1, 0, 0}, {2, 4, 5}), slice(s.t3, {1, 0, 0}, {2, 4, 5}));
  EXPECT_EQ(read(reader, s.t3, {1, 1, 1}, {2, 3, 3}), slice(s.t3, {1, 1, 1}, {2, 3, 3}));
  EXPECT_EQ(read(reader, s.b, {0}, {10}), s.b.values);
  EXPECT_EQ(read(reader, s.b, {3}, {4}), slice(s.b, {3}, {4}));
  EXPECT_EQ(read(reader, s.b, {5}, {0}), std::vector<float>{});
}

TEST(CheckpointRoundTrip, EmptyBlocksAndRankZeroOnlyTensors) {
  TempDir root;
  const Standard s;
  CheckpointReader reader(s.save(root.path(), 10));
  EXPECT_EQ(read(reader, s.ln, {0}, {5}), s.ln.values);
  EXPECT_EQ(read(reader, s.ln, {2}, {2}), slice(s.ln, {2}, {2}));
  EXPECT_EQ(read(reader, s.scale, {}, {}), s.scale.values);
  EXPECT_EQ(read(reader, s.e, {0, 0}, {4, 3}), s.e.values);
  EXPECT_EQ(read(reader, s.e, {2, 1}, {2, 2}), slice(s.e, {2, 1}, {2, 2}));
  EXPECT_TRUE(reader.has("e"));
  EXPECT_FALSE(reader.has("nope"));
  EXPECT_EQ(reader.logical_shape("t3"), (Shape{3, 4, 5}));
}

TEST(CheckpointRoundTrip, MetadataAndState) {
  TempDir root;
  const Standard s;
  const std::filesystem::path dir = s.save(root.path(), 10);
  EXPECT_EQ(dir, root.path() / "step-00000010");
  EXPECT_FALSE(std::filesystem::exists(root.path() / "step-00000010.tmp"));
  EXPECT_FALSE(std::filesystem::exists(dir / "index-rank-00000.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "index-rank-00001.json"));
  std::ifstream in(dir / "metadata.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  EXPECT_EQ(meta["format"], "ndtrain-checkpoint");
  EXPECT_EQ(meta["version"], 2);
  EXPECT_EQ(meta["metadata_crc32c"], metadata_checksum(meta));
  EXPECT_EQ(meta["world_size"], 2);
  EXPECT_EQ(meta["state"]["step"], 10);
  EXPECT_EQ(meta["tensors"]["w"]["logical_shape"].get<Shape>(), (Shape{6, 8}));
  EXPECT_EQ(meta["tensors"]["w"]["dtype"], "f32");
  const nlohmann::json& chunk = meta["tensors"]["w"]["chunks"][1];
  EXPECT_EQ(chunk["offset"].get<Shape>(), (Shape{3, 0}));
  EXPECT_EQ(chunk["shape"].get<Shape>(), (Shape{3, 8}));
  EXPECT_EQ(chunk["file"], "rank-00001.bin");
  EXPECT_EQ(chunk["byte_offset"], 0);
  EXPECT_EQ(chunk["byte_length"], 3 * 8 * 4);
  EXPECT_EQ(meta["tensors"]["e"]["chunks"].size(), 1u);  // the empty block is dropped
  EXPECT_EQ(meta["tensors"].size(), 7u);

  CheckpointReader reader(dir);
  EXPECT_EQ(reader.state()["step"], 10);
}

// A chunk's first read loads it whole to verify its checksum; later reads of the
// same chunk load only the span of rows they need.
TEST(CheckpointRoundTrip, VerifiesEachChunkOnceThenReadsOnlyTheSpan) {
  TempDir root;
  const Standard s;
  CheckpointReader reader(s.save(root.path(), 10));
  read(reader, s.w, {0, 0}, {1, 8});
  EXPECT_EQ(reader.bytes_read(), 3 * 8 * 4);  // all of rank 0's chunk of w
  read(reader, s.w, {1, 0}, {1, 8});
  EXPECT_EQ(reader.bytes_read(), 3 * 8 * 4 + 8 * 4);  // one row
  read(reader, s.w, {1, 2}, {2, 3});
  EXPECT_EQ(reader.bytes_read(), 3 * 8 * 4 + 8 * 4 + (8 + 3) * 4);  // [1, 2] to [2, 4]
}

}  // namespace
}  // namespace ndt::ckpt
