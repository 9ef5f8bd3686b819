// Embedding lookup: forward against the table rows, backward against a reference sum
// and finite differences, the += contract and thread-count independence; the
// vocabulary-slice forms (embedding_*_range) against the whole-table kernels.
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/threads.h"

#include "../common/gradcheck.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace ndt::cpu {
namespace {

using ndt::testing::expect_gradient_matches;
using ndt::testing::random_vector;
using ndt::testing::weighted_sum;

// Ids with repeats (id 3 appears several times) so backward must sum, not overwrite.
std::vector<int32_t> make_ids(int N, int V) {
  std::vector<int32_t> ids(N);
  for (int n = 0; n < N; ++n) ids[n] = (n % 3 == 0) ? 3 : (n * 7 + 1) % V;
  return ids;
}

TEST(Embedding, ForwardCopiesRowsOrAccumulates) {
  const int V = 11, C = 13, N = 17;
  auto table = random_vector(V * C, 1);
  auto ids = make_ids(N, V);
  std::vector<float> out(N * C, 99.0f);
  embedding_forward(out.data(), ids.data(), table.data(), N, C, false);
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) EXPECT_EQ(out[n * C + c], table[ids[n] * C + c]) << n << "," << c;
  }
  auto base = random_vector(N * C, 2);
  std::vector<float> acc = base;
  embedding_forward(acc.data(), ids.data(), table.data(), N, C, true);
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) {
      EXPECT_EQ(acc[n * C + c], base[n * C + c] + table[ids[n] * C + c]) << n << "," << c;
    }
  }
}

TEST(Embedding, BackwardMatchesReferenceAndFiniteDifferences) {
  const int V = 11, C = 13, N = 17;
  auto table = random_vector(V * C, 3);
  auto ids = make_ids(N, V);
  auto wl = random_vector(N * C, 4);  // loss weights = dout
  std::vector<float> dtable(V * C, 0.0f);
  embedding_backward(dtable.data(), wl.data(), ids.data(), N, C);

  std::vector<double> ref(V * C, 0.0);
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) ref[ids[n] * C + c] += wl[n * C + c];
  }
  for (int i = 0; i < V * C; ++i) EXPECT_NEAR(dtable[i], ref[i], 1e-5) << "index " << i;

  std::vector<float> out(N * C);
  auto loss = [&] {
    embedding_forward(out.data(), ids.data(), table.data(), N, C, false);
    return weighted_sum(out.data(), wl.data(), N * C);
  };
  // Linear in the table: differences are exact up to float rounding. Check every element.
  expect_gradient_matches(loss, table.data(), V * C, dtable.data(), "dtable", 1e-2f, 1e-2, 1e-3,
                          V * C);
}

TEST(Embedding, BackwardAccumulates) {
  const int V = 7, C = 5, N = 9;
  auto ids = make_ids(N, V);
  auto dout = random_vector(N * C, 5);
  auto start = random_vector(V * C, 6);
  std::vector<float> once = start, twice = start;
  embedding_backward(once.data(), dout.data(), ids.data(), N, C);
  embedding_backward(twice.data(), dout.data(), ids.data(), N, C);
  embedding_backward(twice.data(), dout.data(), ids.data(), N, C);
  for (int i = 0; i < V * C; ++i) {
    EXPECT_NEAR(twice[i] - start[i], 2.0f * (once[i] - start[i]), 1e-5) << "index " << i;
  }
}

TEST(Embedding, BackwardIsIndependentOfThreadCount) {
  const int saved = num_threads();
  const int V = 5, C = 300, N = 500;  // few rows, many repeats, several column blocks
  auto ids = make_ids(N, V);
  auto dout = random_vector(N * C, 7);
  std::vector<float> d1(V * C, 0.0f), d2(V * C, 0.0f);
  set_num_threads(1);
  embedding_backward(d1.data(), dout.data(), ids.data(), N, C);
  set_num_threads(2);
  embedding_backward(d2.data(), dout.data(), ids.data(), N, C);
  set_num_threads(saved);
  for (int i = 0; i < V * C; ++i) ASSERT_EQ(d1[i], d2[i]) << "index " << i;
}

// ---- Vocabulary slices ----------------------------------------------------------

// Splits [0, V) at the given points; each slice's table is its own contiguous block.
struct Slices {
  std::vector<int64_t> begin, size;
};
Slices split_vocab(int64_t V, std::vector<int64_t> cuts) {
  Slices s;
  int64_t prev = 0;
  cuts.push_back(V);
  for (int64_t c : cuts) {
    s.begin.push_back(prev);
    s.size.push_back(c - prev);
    prev = c;
  }
  return s;
}

TEST(EmbeddingRange, ForwardOwnedRowsAndZeros) {
  const int64_t V = 11, C = 13, N = 17;
  auto table = random_vector(V * C, 20);
  auto ids = make_ids(N, V);
  const int64_t begin = 4, local = 5;  // owns ids 4..8
  std::vector<float> out(N * C, 99.0f);
  embedding_forward_range(out.data(), ids.data(), table.data() + begin * C, begin, local, N, C);
  for (int64_t n = 0; n < N; ++n) {
    const bool owned = ids[n] >= begin && ids[n] < begin + local;
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_EQ(out[n * C + c], owned ? table[ids[n] * C + c] : 0.0f) << "row " << n << " id " << ids[n];
    }
  }
}

// Summing the slices' outputs gives the whole lookup exactly (one row is non-zero), on
// the serial and the parallel path, with an uneven split.
TEST(EmbeddingRange, SlicesSumToWholeLookup) {
  for (int64_t N : {int64_t{9}, int64_t{400}}) {
    const int64_t V = 23, C = 97;
    auto table = random_vector(V * C, 21);
    auto ids = make_ids(static_cast<int>(N), static_cast<int>(V));
    std::vector<float> whole(N * C);
    embedding_forward(whole.data(), ids.data(), table.data(), static_cast<int>(N), static_cast<int>(C), false);
    const Slices s = split_vocab(V, {7, 16});
    std::vector<float> sum(N * C, 0.0f), part(N * C);
    for (size_t k = 0; k < s.begin.size(); ++k) {
      embedding_forward_range(part.data(), ids.data(), table.data() + s.begin[k] * C, s.begin[k], s.size[k], N, C);
      for (int64_t i = 0; i < N * C; ++i) sum[i] += part[i];
    }
    EXPECT_EQ(std::memcmp(sum.data(), whole.data(), whole.size() * sizeof(float)), 0) << "N = " << N;
  }
}

// Backward adds owned rows in row order: bitwise equal to a serial reference loop and,
// slice by slice, to the whole-table embedding_backward; unowned rows change nothing.
TEST(EmbeddingRange, BackwardMatchesSerialReferenceAndWholeTable) {
  for (int64_t N : {int64_t{9}, int64_t{500}}) {  // serial and parallel path (C > one column block)
    const int64_t V = 13, C = 150;
    auto ids = make_ids(static_cast<int>(N), static_cast<int>(V));
    ids[1] = -3;  // ids no slice owns are skipped
    ids[2] = static_cast<int32_t>(V + 4);
    auto dout = random_vector(N * C, 22);
    auto start = random_vector(V * C, 23);

    std::vector<float> whole = start;
    std::vector<int32_t> valid_ids = ids;
    std::vector<float> valid_dout = dout;
    for (int64_t n = 0; n < N; ++n) {  // the whole-table kernel needs valid ids: zero rows instead
      if (ids[n] < 0 || ids[n] >= V) {
        valid_ids[n] = 0;
        std::fill(valid_dout.begin() + n * C, valid_dout.begin() + (n + 1) * C, 0.0f);
      }
    }
    embedding_backward(whole.data(), valid_dout.data(), valid_ids.data(), static_cast<int>(N),
                       static_cast<int>(C));

    const Slices s = split_vocab(V, {5});
    std::vector<float> sliced = start;
    for (size_t k = 0; k < s.begin.size(); ++k) {
      float* dtable = sliced.data() + s.begin[k] * C;
      std::vector<float> ref(dtable, dtable + s.size[k] * C);
      for (int64_t n = 0; n < N; ++n) {
        const int64_t id = ids[n] - s.begin[k];
        if (id < 0 || id >= s.size[k]) continue;
        for (int64_t c = 0; c < C; ++c) ref[id * C + c] += dout[n * C + c];
      }
      embedding_backward_range(dtable, dout.data(), ids.data(), s.begin[k], s.size[k], N, C);
      EXPECT_EQ(std::memcmp(dtable, ref.data(), ref.size() * sizeof(float)), 0) << "N = " << N << " slice " << k;
    }
    // Adding zero rows leaves floats unchanged, so the whole-table result is bitwise equal.
    EXPECT_EQ(std::memcmp(sliced.data(), whole.data(), whole.size() * sizeof(float)), 0) << "N = " << N;
  }
}

TEST(EmbeddingRange, BackwardIsIndependentOfThreadCount) {
  const int saved = num_threads();
  const int64_t V = 6, C = 300, N = 500;
  auto ids = make_ids(static_cast<int>(N), static_cast<int>(V));
  auto dout = random_vector(N * C, 24);
  std::vector<float> d1(3 * C, 0.0f), d2(3 * C, 0.0f);  // slice [2, 5)
  set_num_threads(1);
  embedding_backward_range(d1.data(), dout.data(), ids.data(), 2, 3, N, C);
  set_num_threads(2);
  embedding_backward_range(d2.data(), dout.data(), ids.data(), 2, 3, N, C);
  set_num_threads(saved);
  EXPECT_EQ(std::memcmp(d1.data(), d2.data(), d1.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace ndt::cpu
