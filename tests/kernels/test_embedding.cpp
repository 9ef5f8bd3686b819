// Embedding lookup: forward against the table rows, backward against a reference sum
// and finite differences, the += contract and thread-count independence.
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/threads.h"

#include "../common/gradcheck.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ndt::cpu
