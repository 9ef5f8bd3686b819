#include "core/error.h"
#include "core/rng.h"
#include "data/loader.h"
#include "data/shard.h"
#include "../common/errors.h"
#include "../common/temp_dir.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ndt {
namespace {

using testing::expect_error;
using testing::TempDir;

// A dataset whose token i is i (size <= 65536), so a row's first input is its offset.
struct CountingData {
  explicit CountingData(int64_t n, int64_t first = 0) {
    std::vector<uint16_t> tokens(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<uint16_t>(first + i);
    write_shard(dir.file("d.bin"), tokens);
    data = std::make_unique<TokenDataset>(std::vector<std::string>{dir.file("d.bin")});
  }
  TempDir dir;
  std::unique_ptr<TokenDataset> data;
};

struct Batch {
  std::vector<int32_t> x, y;
  bool operator==(const Batch&) const = default;
};

Batch train(const BatchLoader& l, int64_t step, int row_begin, int rows) {
  Batch b{std::vector<int32_t>(rows * l.T()), std::vector<int32_t>(rows * l.T())};
  l.train_batch(step, row_begin, rows, b.x.data(), b.y.data());
  return b;
}

Batch eval(const BatchLoader& l, int64_t index, int row_begin, int rows) {
  Batch b{std::vector<int32_t>(rows * l.T()), std::vector<int32_t>(rows * l.T())};
  l.eval_batch(index, row_begin, rows, b.x.data(), b.y.data());
  return b;
}

TEST(TokenDataset, ConcatenatesShardsInOrder) {
  TempDir dir;
  write_shard(dir.file("a.bin"), {1, 2, 3});
  write_shard(dir.file("b.bin"), {});
  write_shard(dir.file("c.bin"), {9, 8});
  TokenDataset d({dir.file("c.bin"), dir.file("b.bin"), dir.file("a.bin")});
  ASSERT_EQ(d.size(), 5);
  std::vector<int32_t> all(5);
  d.copy(0, 5, all.data());
  EXPECT_EQ(all, (std::vector<int32_t>{9, 8, 1, 2, 3}));
  expect_error([&] { TokenDataset({dir.file("a.bin"), dir.file("missing.bin")}); },
               {dir.file("missing.bin")});
  EXPECT_THROW(TokenDataset(std::vector<std::string>{}), Error);
}

TEST(BatchLoader, ConstructorErrorsNameSizes) {
  CountingData d(100);
  EXPECT_NO_THROW(BatchLoader(*d.data, 4, 99, 1));  // exactly T + 1 tokens is enough
  expect_error([&] { BatchLoader(*d.data, 4, 100, 1); }, {"100", "101"});
  // Catches: a shard too short for one row reported without its file name.
  expect_error([&] { BatchLoader(*d.data, 4, 100, 1); }, {d.dir.file("d.bin"), "holds 100 tokens"});
  expect_error([&] { BatchLoader(*d.data, 0, 8, 1); }, {"B", "0"});
  expect_error([&] { BatchLoader(*d.data, 4, -3, 1); }, {"T", "-3"});
}

TEST(BatchLoader, TrainOffsetsFollowTheSpecifiedFormula) {
  const int64_t n = 5000;
  const int B = 4, T = 16;
  const uint64_t seed = 1234;
  CountingData d(n);
  BatchLoader l(*d.data, B, T, seed);
  for (int64_t step : {0, 1, 7, 1000000}) {
    Batch b = train(l, step, 0, B);
    for (int r = 0; r < B; ++r) {
      auto w = philox(seed, hash_name("train-batch"), static_cast<uint64_t>(step * B + r));
      uint64_t v = (static_cast<uint64_t>(w[1]) << 32) | w[0];
      int64_t off = static_cast<int64_t>(v % static_cast<uint64_t>(n - T));
      for (int t = 0; t < T; ++t) {
        ASSERT_EQ(b.x[r * T + t], off + t) << "step " << step << " row " << r;
        ASSERT_EQ(b.y[r * T + t], off + t + 1) << "step " << step << " row " << r;
      }
    }
  }
}

TEST(BatchLoader, TrainIsDeterministicPerSeedAndStep) {
  CountingData d(3000);
  BatchLoader a(*d.data, 8, 32, 42), b(*d.data, 8, 32, 42), c(*d.data, 8, 32, 43);
  EXPECT_EQ(train(a, 5, 0, 8), train(b, 5, 0, 8));
  EXPECT_EQ(train(a, 5, 0, 8), train(a, 5, 0, 8));  // asking twice changes nothing
  EXPECT_NE(train(a, 5, 0, 8), train(a, 6, 0, 8));
  EXPECT_NE(train(a, 5, 0, 8), train(c, 5, 0, 8));
  // Rows within one batch differ (start offsets are drawn per row).
  Batch full = train(a, 5, 0, 8);
  std::set<int32_t> starts;
  for (int r = 0; r < 8; ++r) starts.insert(full.x[r * 32]);
  EXPECT_GT(starts.size(), 6u);
}

TEST(BatchLoader, RankSlicesEqualRowsOfTheFullBatch) {
  CountingData d(4000);
  const int B = 8, T = 24;
  BatchLoader l(*d.data, B, T, 7);
  for (int64_t step : {0, 3, 99}) {
    Batch full = train(l, step, 0, B);
    // Four data-parallel ranks of 2 rows, and an uneven split 3 + 5.
    for (auto [begin, rows] : {std::pair{0, 2}, {2, 2}, {4, 2}, {6, 2}, {0, 3}, {3, 5}, {7, 1}}) {
      Batch part = train(l, step, begin, rows);
      for (int i = 0; i < rows * T; ++i) {
        ASSERT_EQ(part.x[i], full.x[begin * T + i]) << "rows " << begin << "+" << rows;
        ASSERT_EQ(part.y[i], full.y[begin * T + i]) << "rows " << begin << "+" << rows;
      }
    }
    // A zero-row request is allowed and writes nothing.
    EXPECT_NO_THROW(l.train_batch(step, B, 0, nullptr, nullptr));
  }
}

TEST(BatchLoader, TargetsAreInputsShiftedByOne) {
  // Tokens are not a counting sequence here: a pseudo-random stream.
  TempDir dir;
  std::vector<uint16_t> tokens(2000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(philox(1, 2, i)[0]);
  write_shard(dir.file("r.bin"), tokens);
  TokenDataset data({dir.file("r.bin")});
  const int B = 4, T = 50;
  BatchLoader l(data, B, T, 9);
  Batch b = train(l, 11, 0, B);
  for (int r = 0; r < B; ++r) {
    for (int t = 0; t + 1 < T; ++t) ASSERT_EQ(b.y[r * T + t], b.x[r * T + t + 1]);
  }
  // Each row is a contiguous window of the data.
  for (int r = 0; r < B; ++r) {
    bool found = false;
    for (size_t off = 0; off + T < tokens.size() && !found; ++off) {
      bool match = true;
      for (int t = 0; t < T && match; ++t) {
        match = tokens[off + t] == b.x[r * T + t] && tokens[off + t + 1] == b.y[r * T + t];
      }
      found = match;
    }
    EXPECT_TRUE(found) << "row " << r;
  }
}

TEST(BatchLoader, TrainOffsetsCoverTheWholeValidRange) {
  // size - T = 3 possible offsets: 0, 1, 2; the last target is then the last token.
  const int T = 10;
  CountingData d(T + 3, 100);
  BatchLoader l(*d.data, 2, T, 5);
  std::set<int32_t> starts;
  for (int64_t step = 0; step < 200; ++step) {
    Batch b = train(l, step, 0, 2);
    for (int r = 0; r < 2; ++r) {
      starts.insert(b.x[r * T] - 100);
      ASSERT_LE(b.y[r * T + T - 1], 100 + T + 2);
    }
  }
  EXPECT_EQ(starts, (std::set<int32_t>{0, 1, 2}));
  // With exactly T + 1 tokens the only window is the whole dataset.
  CountingData e(T + 1);
  BatchLoader m(*e.data, 3, T, 5);
  Batch b = train(m, 17, 0, 3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(b.x[r * T], 0);
    EXPECT_EQ(b.y[r * T + T - 1], T);
  }
}

TEST(BatchLoader, EvalWindowsAreConsecutiveAndWrap) {
  const int64_t n = 100;
  const int B = 3, T = 8;
  CountingData d(n);
  BatchLoader l(*d.data, B, T, 1), other_seed(*d.data, B, T, 999);
  for (int64_t index : {0, 1, 2, 5, 40}) {
    Batch b = eval(l, index, 0, B);
    EXPECT_EQ(b, eval(other_seed, index, 0, B)) << "eval must not depend on the seed";
    for (int r = 0; r < B; ++r) {
      int64_t w = index * B + r;
      int64_t start = (w * T) % (n - T);
      for (int t = 0; t < T; ++t) {
        ASSERT_EQ(b.x[r * T + t], start + t) << "index " << index << " row " << r;
        ASSERT_EQ(b.y[r * T + t], start + t + 1) << "index " << index << " row " << r;
      }
    }
  }
  // Consecutive rows tile the data: batch 0 rows start at 0, 8, 16; batch 1 at 24, 32, 40.
  Batch b0 = eval(l, 0, 0, B), b1 = eval(l, 1, 0, B);
  EXPECT_EQ(b0.x[0], 0);
  EXPECT_EQ(b0.x[T], 8);
  EXPECT_EQ(b0.x[2 * T], 16);
  EXPECT_EQ(b1.x[0], 24);
  EXPECT_EQ(b0.y[T - 1], b0.x[T]);  // last target of a row is the next row's first input
  // Wrap: window 12 starts at 96 mod 92 = 4.
  Batch b4 = eval(l, 4, 0, B);
  EXPECT_EQ(b4.x[0], 4);
  // Rank slices of an eval batch equal the rows of the full one.
  Batch part = eval(l, 2, 1, 2), full = eval(l, 2, 0, B);
  EXPECT_TRUE(std::equal(part.x.begin(), part.x.end(), full.x.begin() + T));
  EXPECT_TRUE(std::equal(part.y.begin(), part.y.end(), full.y.begin() + T));
}

TEST(BatchLoader, RowRangeErrors) {
  CountingData d(200);
  BatchLoader l(*d.data, 4, 8, 1);
  std::vector<int32_t> x(64), y(64);
  expect_error([&] { l.train_batch(0, 3, 2, x.data(), y.data()); }, {"3", "5", "4"});
  expect_error([&] { l.train_batch(0, -1, 1, x.data(), y.data()); }, {"-1"});
  expect_error([&] { l.train_batch(0, 0, -2, x.data(), y.data()); }, {"-2"});
  expect_error([&] { l.eval_batch(0, 0, 5, x.data(), y.data()); }, {"5", "4"});
  expect_error([&] { l.train_batch(-1, 0, 1, x.data(), y.data()); }, {"step", "-1"});
  EXPECT_NO_THROW(l.train_batch(0, 0, 4, x.data(), y.data()));
  EXPECT_NO_THROW(l.eval_batch(0, 4, 0, x.data(), y.data()));
}

}  // namespace
}  // namespace ndt
