// GELU (tanh approximation) and SwiGLU: forward against double references and known
// values, backward against finite differences, the += contract.
#include "kernels/cpu/activation.h"

#include "../common/gradcheck.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ndt::cpu {
namespace {

using ndt::testing::expect_gradient_matches;
using ndt::testing::random_vector;
using ndt::testing::weighted_sum;

double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double silu_ref(double g) { return g / (1.0 + std::exp(-g)); }

// Values from -12 to 12 (tails, where tanh saturates and exp overflows) plus randoms.
std::vector<float> activation_input(int64_t n, uint64_t stream) {
  auto x = random_vector(n, stream, 2.0f);
  for (int64_t i = 0; i < 25 && i < n; ++i) x[i] = -12.0f + static_cast<float>(i);
  x[n - 1] = -100.0f;
  x[n - 2] = 100.0f;
  return x;
}

TEST(Gelu, ForwardMatchesReferenceAndKnownValues) {
  const int64_t n = 1001;
  auto x = activation_input(n, 1);
  std::vector<float> out(n, 5.0f);
  gelu_forward(out.data(), x.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    double want = gelu_ref(x[i]);
    EXPECT_NEAR(out[i], want, 1e-6 * (1 + std::fabs(want))) << "x=" << x[i];
  }
  // Tanh-approximate GELU (not the erf form, which gives 0.8413447 at 1).
  float probe[3] = {1.0f, -1.0f, 0.0f}, got[3];
  gelu_forward(got, probe, 3);
  EXPECT_NEAR(got[0], 0.8411920f, 1e-6);
  EXPECT_NEAR(got[1], -0.1588080f, 1e-6);
  EXPECT_EQ(got[2], 0.0f);
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  const int64_t n = 301;
  auto x = activation_input(n, 2);
  x[n - 1] = -6.0f;  // keep the probe away from |x| = 100 where float spacing exceeds eps
  x[n - 2] = 6.0f;
  auto wl = random_vector(n, 3);
  std::vector<float> out(n);
  auto loss = [&] {
    gelu_forward(out.data(), x.data(), n);
    return weighted_sum(out.data(), wl.data(), n);
  };
  std::vector<float> dx(n, 0.0f);
  gelu_backward(dx.data(), x.data(), wl.data(), n);
  // eps 1e-3 (curvature of GELU near 0 is O(1)), rtol 1e-2, atol 1e-3; every element.
  expect_gradient_matches(loss, x.data(), n, dx.data(), "dinp", 1e-3f, 1e-2, 1e-3, n);
}

TEST(Gelu, BackwardAccumulatesAndSaturates) {
  const int64_t n = 64;
  auto x = activation_input(n, 4);
  auto dout = random_vector(n, 5);
  std::vector<float> d1(n, 0.0f), d2(n, 0.0f);
  gelu_backward(d1.data(), x.data(), dout.data(), n);
  gelu_backward(d2.data(), x.data(), dout.data(), n);
  gelu_backward(d2.data(), x.data(), dout.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(d2[i], 2 * d1[i], 1e-6) << "i=" << i;
  // gelu'(100) = 1, gelu'(-100) = 0, with no NaN from the tails.
  EXPECT_NEAR(d1[n - 2], dout[n - 2], 1e-6);
  EXPECT_NEAR(d1[n - 1], 0.0f, 1e-6);
}

TEST(SwiGlu, ForwardMatchesReference) {
  const int64_t n = 1001;
  auto g = activation_input(n, 10);
  auto u = random_vector(n, 11);
  std::vector<float> out(n, 5.0f);
  swiglu_forward(out.data(), g.data(), u.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    double want = silu_ref(g[i]) * u[i];
    EXPECT_NEAR(out[i], want, 1e-6 * (1 + std::fabs(want))) << "g=" << g[i];
  }
  float gate = 1.0f, up = 2.0f, got;
  swiglu_forward(&got, &gate, &up, 1);
  EXPECT_NEAR(got, 2.0f * 0.7310586f, 1e-6);
}

TEST(SwiGlu, BackwardMatchesFiniteDifferences) {
  const int64_t n = 301;
  auto g = activation_input(n, 12);
  g[n - 1] = -8.0f;
  g[n - 2] = 8.0f;
  auto u = random_vector(n, 13);
  auto wl = random_vector(n, 14);
  std::vector<float> out(n);
  auto loss = [&] {
    swiglu_forward(out.data(), g.data(), u.data(), n);
    return weighted_sum(out.data(), wl.data(), n);
  };
  std::vector<float> dg(n, 0.0f), du(n, 0.0f);
  swiglu_backward(dg.data(), du.data(), wl.data(), g.data(), u.data(), n);
  // eps 1e-3, rtol 1e-2, atol 1e-3; every element.
  expect_gradient_matches(loss, g.data(), n, dg.data(), "dgate", 1e-3f, 1e-2, 1e-3, n);
  expect_gradient_matches(loss, u.data(), n, du.data(), "dup", 1e-3f, 1e-2, 1e-3, n);
}

TEST(SwiGlu, BackwardAccumulates) {
  const int64_t n = 64;
  auto g = activation_input(n, 20);
  auto u = random_vector(n, 21);
  auto dout = random_vector(n, 22);
  std::vector<float> dg1(n, 0.0f), du1(n, 0.0f), dg2(n, 0.0f), du2(n, 0.0f);
  swiglu_backward(dg1.data(), du1.data(), dout.data(), g.data(), u.data(), n);
  swiglu_backward(dg2.data(), du2.data(), dout.data(), g.data(), u.data(), n);
  swiglu_backward(dg2.data(), du2.data(), dout.data(), g.data(), u.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_FALSE(std::isnan(dg1[i])) << "g=" << g[i];
    EXPECT_NEAR(dg2[i], 2 * dg1[i], 1e-5) << "dgate " << i;
    EXPECT_NEAR(du2[i], 2 * du1[i], 1e-5) << "dup " << i;
  }
}

}  // namespace
}  // namespace ndt::cpu
