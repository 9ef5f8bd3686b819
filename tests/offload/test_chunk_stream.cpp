// The swap layout (units at chunk boundaries, arena order kept) and the chunk stream the
// optimizer step and the gradient norm run on: every element visited once, in arena
// order, the written-back files holding what the visitor left, at any read-ahead depth.
#include "../common/temp_dir.h"
#include "offload/chunk_stream.h"
#include "offload/io_stats.h"
#include "offload/swap_layout.h"

#include <gtest/gtest.h>

namespace ndt::offload {
namespace {

constexpr int64_t kChunkBytes = 4096;  // 1024 floats

// Catches: units sharing a chunk, or the file order drifting from the arena order.
TEST(SwapLayout, UnitsStartAtChunkBoundariesInArenaOrder) {
  const SwapLayout layout({{0, 1500}, {1500, 1500}, {1500, 2600}, {2600, 4648}}, 1024);
  EXPECT_EQ(layout.chunks(), 2 + 0 + 2 + 2);
  EXPECT_EQ(layout.region(2).first_chunk, 2);
  EXPECT_EQ(layout.region(3).first_chunk, 4);
  EXPECT_EQ(layout.chunk_arena_range(1), (std::pair<int64_t, int64_t>{1024, 1500}));
  EXPECT_EQ(layout.chunk_arena_range(3), (std::pair<int64_t, int64_t>{2524, 2600}));
  EXPECT_EQ(layout.file_element(1499), 1499);
  EXPECT_EQ(layout.file_element(1500), 2048);
  EXPECT_EQ(layout.file_element(2600), 4096);
  EXPECT_EQ(layout.unit_of_chunk(5), 3);
  EXPECT_EQ(swap_chunks({1500, 0, 1100, 2048}, 1024), 6);
  EXPECT_THROW(SwapLayout({{0, 10}, {20, 30}}, 1024), Error);  // a gap
}

class ChunkStreamTest : public ::testing::TestWithParam<int> {
 protected:
  std::unique_ptr<AsyncIo> io_ = make_async_io(IoBackend::io_uring, 16);
  testing::TempDir dir_;
};

// Catches: a chunk skipped or visited twice, a write-back lost, a read-only file written,
// or a slot reused while its write is still in flight.
TEST_P(ChunkStreamTest, VisitsEveryElementOnceInArenaOrderAndWritesBack) {
  const int depth = GetParam();
  const SwapLayout layout({{0, 3000}, {3000, 3100}, {3100, 7000}}, kChunkBytes / 4);
  SwapFile a(dir_.path() / "a.swap", layout.chunks(), kChunkBytes, MemTag::optimizer, *io_);
  SwapFile b(dir_.path() / "b.swap", layout.chunks(), kChunkBytes, MemTag::grads, *io_);
  std::vector<float> values(7000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  for (const int u : {0, 1, 2}) {
    const SwapRegion& r = layout.region(u);
    b.write_elements(layout.file_element(r.arena_begin), r.arena_end - r.arena_begin, values.data() + r.arena_begin);
  }
  for (int pass = 1; pass <= 3; ++pass) {
    int64_t next = 0;
    stream_chunks(layout, {{&a, true, MemTag::optimizer}, {&b, false, MemTag::grads}}, depth,
                  [&](int64_t, int64_t begin, int64_t end, float* const* v) {
                    ASSERT_EQ(begin, next) << "arena order";
                    for (int64_t e = begin; e < end; ++e) {
                      ASSERT_EQ(v[1][e - begin], static_cast<float>(e));
                      v[0][e - begin] += v[1][e - begin];  // a += b
                    }
                    next = end;
                  });
    EXPECT_EQ(next, 7000);
    std::vector<float> got(7000);
    for (const int u : {0, 1, 2}) {
      const SwapRegion& r = layout.region(u);
      a.read_elements(layout.file_element(r.arena_begin), r.arena_end - r.arena_begin, got.data() + r.arena_begin);
    }
    for (int64_t e = 0; e < 7000; ++e) ASSERT_EQ(got[e], pass * static_cast<float>(e)) << "pass " << pass;
  }
  const IoCounters before = io_counters();
  stream_chunks(layout, {{&b, false, MemTag::grads}}, depth, [](int64_t, int64_t, int64_t, float* const*) {});
  EXPECT_EQ((io_counters() - before).write_bytes, 0) << "a read-only pass writes nothing";
  EXPECT_EQ((io_counters() - before).read_bytes, layout.chunks() * kChunkBytes);
}

INSTANTIATE_TEST_SUITE_P(Depths, ChunkStreamTest, ::testing::Values(0, 1, 3));

}  // namespace
}  // namespace ndt::offload
