// Elementwise helpers: copy and fill on both sides of the chunk / parallel thresholds
// (nothing written past n), zero, add_bias and bias_backward against reference loops.
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/threads.h"

#include "../common/gradcheck.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace ndt::cpu {
namespace {

using ndt::testing::random_vector;

constexpr float kSentinel = -12345.0f;

TEST(Elementwise, CopyAllSizes) {
  // 65536 is the single-memcpy limit; larger sizes take the chunked parallel path.
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{65536}, int64_t{65537}, int64_t{300001}}) {
    const std::vector<float> src = random_vector(n + 1, 30);
    std::vector<float> dst(n + 1, kSentinel);
    copy(dst.data(), src.data(), n);
    EXPECT_EQ(std::memcmp(dst.data(), src.data(), n * sizeof(float)), 0) << "n = " << n;
    EXPECT_EQ(dst[n], kSentinel) << "copy wrote past n = " << n;
  }
}

TEST(Elementwise, FillAndZero) {
  for (int64_t n : {int64_t{0}, int64_t{7}, int64_t{100003}}) {
    std::vector<float> x(n + 1, kSentinel);
    fill(x.data(), -2.5f, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], -2.5f) << "n = " << n << " index " << i;
    EXPECT_EQ(x[n], kSentinel);
    zero(x.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], 0.0f) << "n = " << n << " index " << i;
    EXPECT_EQ(x[n], kSentinel);
  }
}

TEST(Elementwise, AddBiasMatchesReference) {
  for (int64_t rows : {int64_t{3}, int64_t{400}}) {  // serial and parallel path
    const int64_t C = 129;
    const std::vector<float> bias = random_vector(C, 31), base = random_vector(rows * C, 32);
    std::vector<float> out = base;
    add_bias(out.data(), bias.data(), rows, C);
    for (int64_t n = 0; n < rows; ++n) {
      for (int64_t c = 0; c < C; ++c) {
        ASSERT_EQ(out[n * C + c], base[n * C + c] + bias[c]) << "rows " << rows << " at " << n << "," << c;
      }
    }
  }
}

// dbias += column sums, rows added in order 0..rows-1: bitwise equal to that loop.
TEST(Elementwise, BiasBackwardAccumulatesInRowOrder) {
  const int64_t rows = 257, C = 67;
  const std::vector<float> dout = random_vector(rows * C, 33), start = random_vector(C, 34);
  std::vector<float> ref = start;
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t c = 0; c < C; ++c) ref[c] += dout[n * C + c];
  }
  std::vector<float> dbias = start;
  bias_backward(dbias.data(), dout.data(), rows, C);
  EXPECT_EQ(std::memcmp(dbias.data(), ref.data(), C * sizeof(float)), 0);
}

// Catches: threads splitting the rows of the column sums (partial sums added in an order
// that depends on the thread count) instead of the columns.
TEST(Elementwise, BiasBackwardIsIndependentOfThreadCount) {
  const int saved = num_threads();
  const int64_t rows = 301, C = 1000;  // past the parallel threshold; C not a multiple of the column block
  const std::vector<float> dout = random_vector(rows * C, 36), start = random_vector(C, 37);
  std::vector<float> ref = start;
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t c = 0; c < C; ++c) ref[c] += dout[n * C + c];
  }
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    std::vector<float> dbias = start;
    bias_backward(dbias.data(), dout.data(), rows, C);
    EXPECT_EQ(std::memcmp(dbias.data(), ref.data(), C * sizeof(float)), 0) << threads << " threads";
  }
  set_num_threads(saved);
}

TEST(Elementwise, CopyIsIndependentOfThreadCount) {
  const int saved = num_threads();
  const int64_t n = 200003;
  const std::vector<float> src = random_vector(n, 35);
  std::vector<float> a(n), b(n);
  set_num_threads(1);
  copy(a.data(), src.data(), n);
  set_num_threads(2);
  copy(b.data(), src.data(), n);
  set_num_threads(saved);
  EXPECT_EQ(std::memcmp(a.data(), src.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(b.data(), src.data(), n * sizeof(float)), 0);
}

}  // namespace
}  // namespace ndt::cpu
