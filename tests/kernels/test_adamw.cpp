// AdamW against a scalar double reference, the first-step magnitude, grad_scale.
#include "kernels/cpu/adamw.h"

#include "../common/gradcheck.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace {

using ndt::cpu::AdamWStep;
using ndt::testing::random_vector;

struct RefState {
  std::vector<double> p, m, v;
};

void reference_step(RefState& s, const std::vector<float>& grad, const AdamWStep& st) {
  const double b1 = st.beta1, b2 = st.beta2;
  for (size_t i = 0; i < s.p.size(); ++i) {
    const double g = double(grad[i]) * st.grad_scale;
    s.m[i] = b1 * s.m[i] + (1 - b1) * g;
    s.v[i] = b2 * s.v[i] + (1 - b2) * g * g;
    const double mhat = s.m[i] / (1 - std::pow(b1, double(st.t)));
    const double vhat = s.v[i] / (1 - std::pow(b2, double(st.t)));
    s.p[i] -= double(st.lr) *
              (mhat / (std::sqrt(vhat) + st.eps) + double(st.weight_decay) * s.p[i]);
  }
}

void expect_close(const std::vector<float>& got, const std::vector<double>& ref, double rtol,
                  double atol, const char* what) {
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], ref[i], atol + rtol * std::fabs(ref[i])) << what << " index " << i;
  }
}

class AdamWVsReference : public ::testing::TestWithParam<float> {};  // weight decay

TEST_P(AdamWVsReference, OneAndSeveralSteps) {
  const float wd = GetParam();
  const int64_t n = 1000;  // not a multiple of the vector width
  std::vector<float> p = random_vector(n, 200), m(n, 0.0f), v(n, 0.0f);
  RefState ref{std::vector<double>(p.begin(), p.end()), std::vector<double>(n, 0.0),
               std::vector<double>(n, 0.0)};
  for (int64_t t = 1; t <= 10; ++t) {
    const std::vector<float> g = random_vector(n, 300 + t, 3.0f);
    const AdamWStep st{1e-2f, 0.9f, 0.95f, 1e-8f, wd, 0.25f, t};
    ndt::cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n, st);
    reference_step(ref, g, st);
    if (t == 1 || t == 10) {
      SCOPED_TRACE(::testing::Message() << "t " << t << " weight_decay " << wd);
      expect_close(m, ref.m, 1e-5, 1e-7, "m");
      expect_close(v, ref.v, 1e-5, 1e-8, "v");
      expect_close(p, ref.p, 1e-5, 1e-6, "param");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WeightDecay, AdamWVsReference, ::testing::Values(0.0f, 0.1f));

// At t = 1 bias correction gives mhat = g, vhat = g^2, so the update is
// lr * g / (|g| + eps): magnitude lr per element (eps << |g|), against the gradient.
TEST(AdamW, FirstStepMovesEachElementByLr) {
  const int64_t n = 257;
  const float lr = 3e-3f;
  std::vector<float> p(n, 0.0f), m(n, 0.0f), v(n, 0.0f);
  std::vector<float> g = random_vector(n, 400);
  for (auto& x : g) x = x >= 0 ? x + 0.01f : x - 0.01f;  // |g| >= 0.01 >> eps
  ndt::cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n,
                         AdamWStep{lr, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 1});
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(std::fabs(p[i]), lr, lr * 1e-5) << "index " << i;
    ASSERT_LT(p[i] * g[i], 0.0f) << "index " << i;
  }
}

// Weight decay is decoupled: with a zero gradient only param -= lr * wd * param.
TEST(AdamW, WeightDecayWithZeroGradient) {
  const int64_t n = 33;
  std::vector<float> p = random_vector(n, 500), m(n, 0.0f), v(n, 0.0f), g(n, 0.0f);
  const std::vector<float> p0 = p;
  ndt::cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n,
                         AdamWStep{0.1f, 0.9f, 0.999f, 1e-8f, 0.5f, 1.0f, 1});
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(p[i], p0[i] * (1 - 0.1f * 0.5f), 1e-6) << i;
}

// grad_scale multiplies the gradient before anything else: (g, scale 4) == (4 g, scale 1)
// in the moments and parameters.
TEST(AdamW, GradScaleAppliedToGradient) {
  const int64_t n = 100;
  const std::vector<float> p0 = random_vector(n, 600), g = random_vector(n, 601);
  std::vector<float> g4(g);
  for (auto& x : g4) x *= 4.0f;
  std::vector<float> pa = p0, ma(n, 0.1f), va(n, 0.2f), pb = p0, mb(n, 0.1f), vb(n, 0.2f);
  ndt::cpu::adamw_update(pa.data(), g.data(), ma.data(), va.data(), n,
                         AdamWStep{1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, 4.0f, 3});
  ndt::cpu::adamw_update(pb.data(), g4.data(), mb.data(), vb.data(), n,
                         AdamWStep{1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, 3});
  EXPECT_EQ(std::memcmp(ma.data(), mb.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(va.data(), vb.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(pa.data(), pb.data(), n * sizeof(float)), 0);
  // And it is not ignored: scale 1 on g gives different moments.
  std::vector<float> pc = p0, mc(n, 0.1f), vc(n, 0.2f);
  ndt::cpu::adamw_update(pc.data(), g.data(), mc.data(), vc.data(), n,
                         AdamWStep{1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, 3});
  EXPECT_NE(std::memcmp(mc.data(), ma.data(), n * sizeof(float)), 0);
}

// Elementwise, so the result is bitwise the same on 1 and 2 threads (n is large enough
// for the parallel path and odd, so chunk edges differ between the two runs).
TEST(AdamW, DeterministicAcrossThreadCounts) {
  const int64_t n = 100003;
  const std::vector<float> p0 = random_vector(n, 700), g = random_vector(n, 701);
  const int saved = omp_get_max_threads();
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> p = p0, m(n, 0.0f), v(n, 0.0f);
    for (int64_t t = 1; t <= 3; ++t) {
      ndt::cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n,
                             AdamWStep{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.5f, t});
    }
    p.insert(p.end(), m.begin(), m.end());
    p.insert(p.end(), v.begin(), v.end());
    return p;
  };
  const std::vector<float> one = run(1), two = run(2);
  omp_set_num_threads(saved);
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
}

}  // namespace
