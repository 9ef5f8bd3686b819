// LayerNorm and RMSNorm: forward against double-precision references, backward against
// finite differences for every input and parameter, the += contract, null skipping
// and thread-count independence of the parameter gradients.
#include "kernels/cpu/norm.h"
#include "kernels/cpu/threads.h"

#include "../common/gradcheck.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ndt::cpu {
namespace {

using ndt::testing::expect_gradient_matches;
using ndt::testing::random_vector;
using ndt::testing::weighted_sum;

constexpr float kEps = 1e-5f;

// Inputs with a per-row offset and scale, so mean subtraction and rstd both matter.
std::vector<float> norm_input(int N, int C, uint64_t stream) {
  auto x = random_vector(N * C, stream);
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) x[n * C + c] = 0.5f * n + (1.0f + 0.25f * n) * x[n * C + c];
  }
  return x;
}

std::vector<float> norm_weight(int C, uint64_t stream) {
  auto w = random_vector(C, stream, 0.3f);
  for (auto& v : w) v += 1.0f;
  return w;
}

TEST(LayerNorm, ForwardMatchesReference) {
  const int N = 5, C = 67;
  auto x = norm_input(N, C, 1);
  auto w = norm_weight(C, 2);
  auto b = random_vector(C, 3);
  for (const float* bias : {static_cast<const float*>(b.data()), static_cast<const float*>(nullptr)}) {
    std::vector<float> out(N * C, 7.0f), mean(N, 7.0f), rstd(N, 7.0f);
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), bias, N, C, kEps);
    for (int n = 0; n < N; ++n) {
      double m = 0, v = 0;
      for (int c = 0; c < C; ++c) m += x[n * C + c];
      m /= C;
      for (int c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
      double s = 1.0 / std::sqrt(v / C + kEps);
      EXPECT_NEAR(mean[n], m, 1e-5 * (1 + std::fabs(m))) << "row " << n;
      EXPECT_NEAR(rstd[n], s, 1e-5 * s) << "row " << n;
      for (int c = 0; c < C; ++c) {
        double want = (x[n * C + c] - m) * s * w[c] + (bias ? bias[c] : 0.0);
        EXPECT_NEAR(out[n * C + c], want, 1e-5 * (1 + std::fabs(want)))
            << (bias ? "bias" : "no bias") << " row " << n << " col " << c;
      }
    }
  }
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  const int N = 4, C = 37;
  auto x = norm_input(N, C, 10);
  auto w = norm_weight(C, 11);
  auto b = random_vector(C, 12);
  auto wl = random_vector(N * C, 13);
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                      kEps);
    return weighted_sum(out.data(), wl.data(), N * C);
  };
  loss();  // saved statistics for the unperturbed input
  std::vector<float> dx(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
  layernorm_backward(dx.data(), dw.data(), db.data(), wl.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  // eps 1e-2 on O(1) inputs: truncation error O(eps^2); rtol 2e-2, atol 1e-3. All elements.
  expect_gradient_matches(loss, x.data(), N * C, dx.data(), "dinp", 1e-2f, 2e-2, 1e-3, N * C);
  expect_gradient_matches(loss, w.data(), C, dw.data(), "dweight", 1e-2f, 2e-2, 1e-3, C);
  expect_gradient_matches(loss, b.data(), C, db.data(), "dbias", 1e-2f, 2e-2, 1e-3, C);
}

TEST(LayerNorm, BackwardAccumulatesAndSkipsNulls) {
  const int N = 3, C = 70;
  auto x = norm_input(N, C, 20);
  auto w = norm_weight(C, 21);
  auto dout = random_vector(N * C, 22);
  std::vector<float> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), nullptr, N, C, kEps);
  std::vector<float> dx1(N * C, 0.0f), dw1(C, 0.0f), db1(C, 0.0f);
  layernorm_backward(dx1.data(), dw1.data(), db1.data(), dout.data(), x.data(), w.data(),
                     mean.data(), rstd.data(), N, C);
  std::vector<float> dx2(N * C, 0.0f), dw2(C, 0.0f), db2(C, 0.0f);
  for (int rep = 0; rep < 2; ++rep) {
    layernorm_backward(dx2.data(), dw2.data(), db2.data(), dout.data(), x.data(), w.data(),
                       mean.data(), rstd.data(), N, C);
  }
  for (int i = 0; i < N * C; ++i) EXPECT_NEAR(dx2[i], 2 * dx1[i], 1e-5) << "dinp " << i;
  for (int i = 0; i < C; ++i) EXPECT_NEAR(dw2[i], 2 * dw1[i], 1e-5) << "dweight " << i;
  for (int i = 0; i < C; ++i) EXPECT_NEAR(db2[i], 2 * db1[i], 1e-5) << "dbias " << i;

  std::vector<float> only(N * C, 0.0f);
  layernorm_backward(only.data(), nullptr, nullptr, dout.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  for (int i = 0; i < N * C; ++i) EXPECT_EQ(only[i], dx1[i]) << "dinp alone " << i;
  only.assign(C, 0.0f);
  layernorm_backward(nullptr, only.data(), nullptr, dout.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  for (int i = 0; i < C; ++i) EXPECT_EQ(only[i], dw1[i]) << "dweight alone " << i;
}

TEST(RMSNorm, ForwardMatchesReference) {
  const int N = 5, C = 67;
  auto x = norm_input(N, C, 30);
  auto w = norm_weight(C, 31);
  std::vector<float> out(N * C, 7.0f), rstd(N, 7.0f);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  for (int n = 0; n < N; ++n) {
    double sq = 0;
    for (int c = 0; c < C; ++c) sq += static_cast<double>(x[n * C + c]) * x[n * C + c];
    double s = 1.0 / std::sqrt(sq / C + kEps);
    EXPECT_NEAR(rstd[n], s, 1e-5 * s) << "row " << n;
    for (int c = 0; c < C; ++c) {
      double want = x[n * C + c] * s * w[c];
      EXPECT_NEAR(out[n * C + c], want, 1e-5 * (1 + std::fabs(want))) << n << "," << c;
    }
  }
}

TEST(RMSNorm, BackwardMatchesFiniteDifferences) {
  const int N = 4, C = 37;
  auto x = norm_input(N, C, 40);
  auto w = norm_weight(C, 41);
  auto wl = random_vector(N * C, 42);
  std::vector<float> out(N * C), rstd(N);
  auto loss = [&] {
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
    return weighted_sum(out.data(), wl.data(), N * C);
  };
  loss();
  std::vector<float> dx(N * C, 0.0f), dw(C, 0.0f);
  rmsnorm_backward(dx.data(), dw.data(), wl.data(), x.data(), w.data(), rstd.data(), N, C);
  // Same tolerances as LayerNorm: eps 1e-2, rtol 2e-2, atol 1e-3, every element.
  expect_gradient_matches(loss, x.data(), N * C, dx.data(), "dinp", 1e-2f, 2e-2, 1e-3, N * C);
  expect_gradient_matches(loss, w.data(), C, dw.data(), "dweight", 1e-2f, 2e-2, 1e-3, C);
}

TEST(RMSNorm, BackwardAccumulates) {
  const int N = 3, C = 70;
  auto x = norm_input(N, C, 50);
  auto w = norm_weight(C, 51);
  auto dout = random_vector(N * C, 52);
  std::vector<float> out(N * C), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  std::vector<float> dx1(N * C, 0.0f), dw1(C, 0.0f), dx2(N * C, 0.0f), dw2(C, 0.0f);
  rmsnorm_backward(dx1.data(), dw1.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  rmsnorm_backward(dx2.data(), dw2.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  rmsnorm_backward(dx2.data(), dw2.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  for (int i = 0; i < N * C; ++i) EXPECT_NEAR(dx2[i], 2 * dx1[i], 1e-5) << "dinp " << i;
  for (int i = 0; i < C; ++i) EXPECT_NEAR(dw2[i], 2 * dw1[i], 1e-5) << "dweight " << i;
}

TEST(Norm, ParameterGradientsAreIndependentOfThreadCount) {
  const int saved = num_threads();
  const int N = 301, C = 200;
  auto x = norm_input(N, C, 60);
  auto w = norm_weight(C, 61);
  auto dout = random_vector(N * C, 62);
  std::vector<float> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), nullptr, N, C, kEps);
  std::vector<float> dw[2], db[2], dx[2];
  for (int t = 0; t < 2; ++t) {
    set_num_threads(t + 1);
    dw[t].assign(C, 0.0f);
    db[t].assign(C, 0.0f);
    dx[t].assign(N * C, 0.0f);
    layernorm_backward(dx[t].data(), dw[t].data(), db[t].data(), dout.data(), x.data(), w.data(),
                       mean.data(), rstd.data(), N, C);
  }
  set_num_threads(saved);
  for (int c = 0; c < C; ++c) {
    ASSERT_EQ(dw[0][c], dw[1][c]) << "dweight " << c;
    ASSERT_EQ(db[0][c], db[1][c]) << "dbias " << c;
  }
  for (int i = 0; i < N * C; ++i) ASSERT_EQ(dx[0][i], dx[1][i]) << "dinp " << i;
}

}  // namespace
}  // namespace ndt::cpu
