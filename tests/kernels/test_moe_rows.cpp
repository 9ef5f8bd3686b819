// An MoE block's row moves (kernels/cpu/moe_rows.h) against reference loops, with dropped
// slots and a shuffled dispatch order, on one and two threads: the same bits on both.
#include "kernels/cpu/moe_rows.h"
#include "kernels/cpu/threads.h"

#include "../common/gradcheck.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace ndt::cpu {
namespace {

using ndt::testing::random_vector;

// N tokens x k slots, every third slot dropped (-1), the kept ones in a shuffled order of
// rows; C wide enough that the kernels take their threaded path (N k C >= 2^15).
struct Routing {
  int64_t N = 97, C = 200;
  int k = 3;
  std::vector<int64_t> row;
  int64_t kept = 0;
  Routing() {
    std::vector<int64_t> order;
    for (int64_t s = 0; s < N * k; ++s) {
      if (s % 3 != 1) order.push_back(kept++);
    }
    std::shuffle(order.begin(), order.end(), std::mt19937(5));
    size_t next = 0;
    for (int64_t s = 0; s < N * k; ++s) row.push_back(s % 3 == 1 ? -1 : order[next++]);
  }
};

struct Outputs {
  std::vector<float> rows, out, drows, dweight, dx;
};

Outputs run_all(const Routing& r, int threads) {
  set_num_threads(threads);
  const std::vector<float> x = random_vector(r.N * r.C, 1), y = random_vector(r.kept * r.C, 2);
  const std::vector<float> weight = random_vector(r.N * r.k, 3), dout = random_vector(r.N * r.C, 4);
  Outputs o;
  o.rows.assign(static_cast<size_t>(r.kept * r.C), 0.0f);
  moe_dispatch_rows(o.rows.data(), x.data(), r.row.data(), r.N, r.k, r.C);
  o.out = random_vector(r.N * r.C, 5);  // combine adds to what is there
  moe_combine(o.out.data(), y.data(), r.row.data(), weight.data(), r.N, r.k, r.C);
  o.drows.assign(static_cast<size_t>(r.kept * r.C), 0.0f);
  o.dweight.assign(static_cast<size_t>(r.N * r.k), -7.0f);
  moe_combine_backward(o.drows.data(), o.dweight.data(), dout.data(), y.data(), r.row.data(), weight.data(), r.N, r.k,
                       r.C);
  o.dx = random_vector(r.N * r.C, 6);
  moe_gather_add(o.dx.data(), o.drows.data(), r.row.data(), r.N, r.k, r.C);
  set_num_threads(1);
  return o;
}

// Catches: a row sent to or read from the wrong place, a dropped slot moved, the
// combine or the gather not adding into its output, a dropped slot's weight gradient
// written, or an order of sums that changes with the thread count.
TEST(MoeRows, MovesMatchReferenceLoopsOnAnyThreadCount) {
  const Routing r;
  const Outputs one = run_all(r, 1), two = run_all(r, 2);
  EXPECT_EQ(one.rows, two.rows);
  EXPECT_EQ(one.out, two.out);
  EXPECT_EQ(one.drows, two.drows);
  EXPECT_EQ(one.dweight, two.dweight);
  EXPECT_EQ(one.dx, two.dx);

  const std::vector<float> x = random_vector(r.N * r.C, 1), y = random_vector(r.kept * r.C, 2);
  const std::vector<float> weight = random_vector(r.N * r.k, 3), dout = random_vector(r.N * r.C, 4);
  std::vector<float> out = random_vector(r.N * r.C, 5), dx = random_vector(r.N * r.C, 6);
  for (int64_t t = 0; t < r.N; ++t) {
    for (int j = 0; j < r.k; ++j) {
      const int64_t s = t * r.k + j, row = r.row[static_cast<size_t>(s)];
      if (row < 0) {
        EXPECT_EQ(one.dweight[static_cast<size_t>(s)], -7.0f) << "dropped slot " << s;
        continue;
      }
      double dot = 0;
      for (int64_t c = 0; c < r.C; ++c) {
        const size_t tc = static_cast<size_t>(t * r.C + c), rc = static_cast<size_t>(row * r.C + c);
        ASSERT_EQ(one.rows[rc], x[tc]) << "dispatch, slot " << s;
        out[tc] += weight[static_cast<size_t>(s)] * y[rc];
        ASSERT_EQ(one.drows[rc], weight[static_cast<size_t>(s)] * dout[tc]) << "combine backward, slot " << s;
        dot += static_cast<double>(dout[tc]) * y[rc];
        dx[tc] += one.drows[rc];
      }
      EXPECT_EQ(one.dweight[static_cast<size_t>(s)], static_cast<float>(dot)) << "slot " << s;
    }
  }
  EXPECT_EQ(one.dx, dx);
  // The combine's multiply-add may be fused in one build and not in the other.
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(one.out[i], out[i], 1e-6f * (1.0f + std::fabs(out[i]))) << "combine, element " << i;
  }
}

}  // namespace
}  // namespace ndt::cpu
