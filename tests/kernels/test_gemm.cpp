// gemm / linear layer against naive double-precision loops, the linear backward against
// finite differences, and the thread-count setting.
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/threads.h"

#include "../common/gradcheck.h"
#include "core/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace ndt::cpu {
namespace {

using ndt::testing::expect_gradient_matches;
using ndt::testing::random_vector;
using ndt::testing::weighted_sum;

// Restores the thread count a test changed.
class ThreadGuard {
 public:
  ThreadGuard() : saved_(num_threads()) {}
  ~ThreadGuard() { set_num_threads(saved_); }

 private:
  int saved_;
};

// C = alpha op(A) op(B) + beta C in double, row-major with leading dimensions.
void reference_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc) {
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int k = 0; k < K; ++k) {
        double a = ta ? A[k * lda + m] : A[m * lda + k];
        double b = tb ? B[n * ldb + k] : B[k * ldb + n];
        s += a * b;
      }
      C[m * ldc + n] = static_cast<float>(alpha * s + static_cast<double>(beta) * C[m * ldc + n]);
    }
  }
}

struct GemmCase {
  bool ta, tb;
};

class GemmTranspose : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmTranspose, MatchesReferenceWithPaddedLeadingDims) {
  const auto [ta, tb] = GetParam();
  const int M = 37, N = 29, K = 23;
  // Stored shapes: op(A) is MxK, so A is KxM when transposed; padding of 3/5/7 columns.
  const int a_rows = ta ? K : M, a_cols = ta ? M : K;
  const int b_rows = tb ? N : K, b_cols = tb ? K : N;
  const int lda = a_cols + 3, ldb = b_cols + 5, ldc = N + 7;
  std::vector<float> A = random_vector(static_cast<int64_t>(a_rows) * lda, 1);
  std::vector<float> B = random_vector(static_cast<int64_t>(b_rows) * ldb, 2);
  std::vector<float> C = random_vector(static_cast<int64_t>(M) * ldc, 3);
  std::vector<float> ref = C;
  const float alpha = 0.75f, beta = -0.5f;
  gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  reference_gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, ref.data(), ldc);
  for (int m = 0; m < M; ++m) {
    for (int j = 0; j < ldc; ++j) {
      const float got = C[m * ldc + j], want = ref[m * ldc + j];
      if (j < N) {
        // K = 23 products of O(1) values: float error ~1e-6; 1e-4 relative is generous.
        EXPECT_NEAR(got, want, 1e-4 * (1.0 + std::fabs(want))) << "m=" << m << " n=" << j;
      } else {
        EXPECT_EQ(got, want) << "padding column " << j << " of row " << m << " was written";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, GemmTranspose,
                         ::testing::Values(GemmCase{false, false}, GemmCase{false, true},
                                           GemmCase{true, false}, GemmCase{true, true}),
                         [](const auto& info) {
                           return std::string(info.param.ta ? "T" : "N") +
                                  (info.param.tb ? "T" : "N");
                         });

void reference_linear(float* out, const float* inp, const float* w, const float* bias, int N,
                      int IC, int OC) {
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      double s = bias ? bias[o] : 0.0;
      for (int i = 0; i < IC; ++i) s += static_cast<double>(inp[n * IC + i]) * w[o * IC + i];
      out[n * OC + o] = static_cast<float>(s);
    }
  }
}

TEST(Linear, ForwardMatchesReferenceWithAndWithoutBias) {
  const int N = 13, IC = 19, OC = 11;
  auto inp = random_vector(N * IC, 10);
  auto w = random_vector(OC * IC, 11);
  auto bias = random_vector(OC, 12);
  for (const float* b : {static_cast<const float*>(bias.data()), static_cast<const float*>(nullptr)}) {
    std::vector<float> out(N * OC, 123.0f);  // garbage: forward must overwrite
    std::vector<float> ref(N * OC);
    linear_forward(out.data(), inp.data(), w.data(), b, N, IC, OC);
    reference_linear(ref.data(), inp.data(), w.data(), b, N, IC, OC);
    for (int i = 0; i < N * OC; ++i) {
      EXPECT_NEAR(out[i], ref[i], 1e-4 * (1.0 + std::fabs(ref[i])))
          << (b ? "bias" : "no bias") << " index " << i;
    }
  }
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  const int N = 7, IC = 9, OC = 5;
  auto inp = random_vector(N * IC, 20);
  auto w = random_vector(OC * IC, 21);
  auto bias = random_vector(OC, 22);
  auto wl = random_vector(N * OC, 23);  // loss weights = dout
  std::vector<float> out(N * OC);
  auto loss = [&] {
    linear_forward(out.data(), inp.data(), w.data(), bias.data(), N, IC, OC);
    return weighted_sum(out.data(), wl.data(), N * OC);
  };
  std::vector<float> dinp(N * IC, 0.0f), dw(OC * IC, 0.0f), db(OC, 0.0f);
  linear_backward(dinp.data(), dw.data(), db.data(), wl.data(), inp.data(), w.data(), N, IC, OC);
  // The loss is linear in each input: central differences are exact up to float rounding.
  expect_gradient_matches(loss, inp.data(), N * IC, dinp.data(), "dinp", 1e-2f, 1e-2, 1e-3);
  expect_gradient_matches(loss, w.data(), OC * IC, dw.data(), "dweight", 1e-2f, 1e-2, 1e-3);
  expect_gradient_matches(loss, bias.data(), OC, db.data(), "dbias", 1e-2f, 1e-2, 1e-3);
}

TEST(Linear, BackwardAccumulatesAndSkipsNulls) {
  const int N = 6, IC = 5, OC = 4;
  auto inp = random_vector(N * IC, 30);
  auto w = random_vector(OC * IC, 31);
  auto dout = random_vector(N * OC, 32);
  std::vector<float> dinp1(N * IC, 0.0f), dw1(OC * IC, 0.0f), db1(OC, 0.0f);
  linear_backward(dinp1.data(), dw1.data(), db1.data(), dout.data(), inp.data(), w.data(), N, IC,
                  OC);
  std::vector<float> dinp2(N * IC, 0.0f), dw2(OC * IC, 0.0f), db2(OC, 0.0f);
  for (int rep = 0; rep < 2; ++rep) {
    linear_backward(dinp2.data(), dw2.data(), db2.data(), dout.data(), inp.data(), w.data(), N, IC,
                    OC);
  }
  for (int i = 0; i < N * IC; ++i) EXPECT_NEAR(dinp2[i], 2 * dinp1[i], 1e-5) << "dinp " << i;
  for (int i = 0; i < OC * IC; ++i) EXPECT_NEAR(dw2[i], 2 * dw1[i], 1e-5) << "dweight " << i;
  for (int i = 0; i < OC; ++i) EXPECT_NEAR(db2[i], 2 * db1[i], 1e-5) << "dbias " << i;

  // Each gradient alone (others null) equals the one computed together.
  std::vector<float> only(N * IC, 0.0f);
  linear_backward(only.data(), nullptr, nullptr, dout.data(), inp.data(), w.data(), N, IC, OC);
  for (int i = 0; i < N * IC; ++i) EXPECT_EQ(only[i], dinp1[i]) << "dinp alone " << i;
  only.assign(OC * IC, 0.0f);
  linear_backward(nullptr, only.data(), nullptr, dout.data(), inp.data(), w.data(), N, IC, OC);
  for (int i = 0; i < OC * IC; ++i) EXPECT_EQ(only[i], dw1[i]) << "dweight alone " << i;
  only.assign(OC, 0.0f);
  linear_backward(nullptr, nullptr, only.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
  for (int i = 0; i < OC; ++i) EXPECT_EQ(only[i], db1[i]) << "dbias alone " << i;
}

TEST(Linear, BiasGradientIsIndependentOfThreadCount) {
  ThreadGuard guard;
  const int N = 257, IC = 3, OC = 67;
  auto inp = random_vector(N * IC, 40);
  auto w = random_vector(OC * IC, 41);
  auto dout = random_vector(N * OC, 42);
  std::vector<float> db1(OC, 0.0f), db2(OC, 0.0f);
  set_num_threads(1);
  linear_backward(nullptr, nullptr, db1.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
  set_num_threads(2);
  linear_backward(nullptr, nullptr, db2.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
  for (int o = 0; o < OC; ++o) {
    EXPECT_EQ(db1[o], db2[o]) << "column " << o;
    double ref = 0;
    for (int n = 0; n < N; ++n) ref += dout[n * OC + o];
    EXPECT_NEAR(db1[o], ref, 1e-4) << "column " << o;
  }
}

TEST(Threads, SetAndGet) {
  ThreadGuard guard;
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  set_num_threads(2);
  EXPECT_EQ(num_threads(), 2);
}

TEST(Threads, RejectsZeroNamingTheValue) {
  ThreadGuard guard;
  try {
    set_num_threads(0);
    FAIL() << "set_num_threads(0) did not throw";
  } catch (const ndt::Error& e) {
    EXPECT_NE(std::string(e.what()).find('0'), std::string::npos) << e.what();
  }
  try {
    set_num_threads(-3);
    FAIL() << "set_num_threads(-3) did not throw";
  } catch (const ndt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("-3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ndt::cpu
