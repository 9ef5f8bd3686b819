// Finite-difference gradient checks shared by the tests. Float32 kernels are checked
// with central differences of a scalar loss accumulated in double; the tolerance is
// stated at each call (typically eps 1e-2 on O(1) inputs, 2e-2 relative).
#pragma once

#include "core/rng.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

namespace ndt::testing {

// n values, normal with the given std, from the counter-based RNG (stream picks the vector).
inline std::vector<float> random_vector(int64_t n, uint64_t stream, float std = 1.0f,
                                        uint64_t seed = 1234) {
  std::vector<float> v(static_cast<size_t>(n));
  fill_normal(v.data(), n, 0, 0.0f, std, seed, stream);
  return v;
}

// sum_i a[i] * w[i] in double: turns a tensor output into a scalar loss whose
// gradient with respect to a is w.
inline double weighted_sum(const float* a, const float* w, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * w[i];
  return s;
}

// Compares analytic[i] with (loss(x_i + eps) - loss(x_i - eps)) / (2 eps) for up to
// max_checks indices spread over x. Passes when |a - fd| <= atol + rtol * max(|a|, |fd|).
inline void expect_gradient_matches(const std::function<double()>& loss, float* x, int64_t n,
                                    const float* analytic, const char* what, float eps = 1e-2f,
                                    double rtol = 2e-2, double atol = 1e-3,
                                    int64_t max_checks = 64) {
  int64_t stride = n > max_checks ? n / max_checks : 1;
  for (int64_t i = 0; i < n; i += stride) {
    float saved = x[i];
    x[i] = saved + eps;
    double plus = loss();
    x[i] = saved - eps;
    double minus = loss();
    x[i] = saved;
    double fd = (plus - minus) / (2.0 * eps);
    double a = analytic[i];
    double tol = atol + rtol * std::max(std::fabs(a), std::fabs(fd));
    EXPECT_NEAR(a, fd, tol) << what << " index " << i;
  }
}

}  // namespace ndt::testing
