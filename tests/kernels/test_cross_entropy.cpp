// Fused softmax cross-entropy: losses against a double reference (including logits
// far beyond exp's float range), the in-place gradient against finite differences,
// grad_scale = 0 leaving the logits alone, and target validation.
#include "kernels/cpu/cross_entropy.h"

#include "../common/gradcheck.h"
#include "core/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace {

using ndt::testing::random_vector;

// logsumexp(row) - row[target] in double, max-subtracted.
double reference_loss(const float* row, int V, int target) {
  double mx = row[0];
  for (int j = 1; j < V; ++j) mx = std::max(mx, double(row[j]));
  double sum = 0;
  for (int j = 0; j < V; ++j) sum += std::exp(double(row[j]) - mx);
  return mx + std::log(sum) - row[target];
}

std::vector<int32_t> make_targets(int N, int V) {
  std::vector<int32_t> t(N);
  for (int n = 0; n < N; ++n) t[n] = (n * 7 + 3) % V;
  return t;
}

TEST(CrossEntropy, LossMatchesReference) {
  const int N = 6, V = 37;
  const std::vector<float> logits = random_vector(N * V, 100, 3.0f);
  const std::vector<int32_t> targets = make_targets(N, V);
  for (float grad_scale : {0.0f, 1.0f}) {  // both code paths compute the loss
    std::vector<float> work = logits, losses(N, -1.0f);
    ndt::cpu::softmax_cross_entropy(work.data(), losses.data(), targets.data(), N, V, grad_scale);
    for (int n = 0; n < N; ++n) {
      const double ref = reference_loss(logits.data() + n * V, V, targets[n]);
      EXPECT_NEAR(losses[n], ref, 1e-5 * (1 + std::fabs(ref))) << "row " << n;
    }
  }
}

// exp(1000) overflows float and double: only a max-subtracted kernel gets these right.
TEST(CrossEntropy, StableForLargeLogits) {
  const int V = 5;
  std::vector<float> logits = {
      1000.0f, 999.0f,  -1000.0f, 998.0f,  1000.0f,   // target 1
      1000.0f, 1000.0f, 1000.0f,  1000.0f, 1000.0f,   // all equal: log V
      -1000.0f, -999.0f, -1000.0f, -998.0f, -1000.0f, // all very negative, target 3
      500.0f,  -500.0f, 0.0f,     0.0f,    0.0f,      // target 1: loss 1000
  };
  const std::vector<int32_t> targets = {1, 2, 3, 1};
  const int N = int(targets.size());
  const std::vector<float> original = logits;
  std::vector<float> losses(N);
  ndt::cpu::softmax_cross_entropy(logits.data(), losses.data(), targets.data(), N, V, 1.0f);
  for (int n = 0; n < N; ++n) {
    const double ref = reference_loss(original.data() + n * V, V, targets[n]);
    ASSERT_TRUE(std::isfinite(losses[n])) << "row " << n;
    EXPECT_NEAR(losses[n], ref, 1e-5 * (1 + std::fabs(ref))) << "row " << n;
    double gsum = 0;
    for (int j = 0; j < V; ++j) {
      ASSERT_TRUE(std::isfinite(logits[n * V + j])) << "row " << n << " col " << j;
      gsum += logits[n * V + j];
    }
    EXPECT_NEAR(gsum, 0.0, 1e-6) << "gradient of row " << n << " must sum to 0";
  }
  EXPECT_NEAR(losses[1], std::log(5.0), 1e-6);
  EXPECT_NEAR(losses[3], 1000.0, 1e-3);
  // Row 0: softmax weights of (1000, 999, -1000, 998, 1000) relative to e^0.
  const double z = 2 + std::exp(-1.0) + std::exp(-2.0);
  EXPECT_NEAR(logits[0], 1 / z, 1e-6);
  EXPECT_NEAR(logits[1], std::exp(-1.0) / z - 1, 1e-6);
  EXPECT_EQ(logits[2], 0.0f);  // e^-2000: exactly zero
}

// The in-place gradient grad_scale * (softmax - onehot) is d(grad_scale * loss)/dlogits.
TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  const int N = 4, V = 19;
  const float grad_scale = 0.5f;
  std::vector<float> logits = random_vector(N * V, 110, 2.0f);
  const std::vector<int32_t> targets = make_targets(N, V);
  std::vector<float> grad = logits, losses(N);
  ndt::cpu::softmax_cross_entropy(grad.data(), losses.data(), targets.data(), N, V, grad_scale);
  auto loss = [&] {
    std::vector<float> l(N);
    ndt::cpu::softmax_cross_entropy(logits.data(), l.data(), targets.data(), N, V, 0.0f);
    double s = 0;
    for (float x : l) s += double(grad_scale) * x;
    return s;
  };
  // eps 1e-2, rtol 2e-2, atol 1e-3; every element is checked (N * V < 128).
  ndt::testing::expect_gradient_matches(loss, logits.data(), N * V, grad.data(), "dlogits", 1e-2f,
                                        2e-2, 1e-3, N * V);
}

TEST(CrossEntropy, ZeroGradScaleLeavesLogitsUnchanged) {
  const int N = 3, V = 1000;
  std::vector<float> logits = random_vector(N * V, 120, 5.0f);
  const std::vector<float> original = logits;
  const std::vector<int32_t> targets = make_targets(N, V);
  std::vector<float> losses(N);
  ndt::cpu::softmax_cross_entropy(logits.data(), losses.data(), targets.data(), N, V, 0.0f);
  EXPECT_EQ(std::memcmp(logits.data(), original.data(), logits.size() * sizeof(float)), 0);
  for (int n = 0; n < N; ++n) {
    EXPECT_NEAR(losses[n], reference_loss(original.data() + n * V, V, targets[n]), 1e-4);
  }
}

TEST(CrossEntropy, TargetOutOfRangeThrows) {
  const int N = 3, V = 8;
  for (int32_t bad : {8, -1, 12345}) {
    std::vector<float> logits = random_vector(N * V, 130);
    const std::vector<float> original = logits;
    std::vector<int32_t> targets = {0, 7, bad};
    std::vector<float> losses(N);
    try {
      ndt::cpu::softmax_cross_entropy(logits.data(), losses.data(), targets.data(), N, V, 1.0f);
      ADD_FAILURE() << "no throw for target " << bad;
    } catch (const ndt::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("row 2"), std::string::npos) << msg;
    }
    // Nothing was modified before the check.
    EXPECT_EQ(std::memcmp(logits.data(), original.data(), logits.size() * sizeof(float)), 0);
  }
}

}  // namespace
