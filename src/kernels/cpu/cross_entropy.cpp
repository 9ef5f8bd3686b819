// Fused softmax cross-entropy: max-subtracted, exp sums accumulated in double, the
// gradient written in place over the logits. One OpenMP iteration per row; each row
// is done by one thread in a fixed order, so results do not depend on the thread count.
#include "kernels/cpu/cross_entropy.h"

#include "core/error.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace ndt::cpu {
namespace {

// exp(x) in plain float arithmetic so the row loops vectorise (glibc's vector expf is
// only declared under -ffast-math). Cephes range reduction and polynomial, about 1 ulp
// relative error on [-87.3, 88.3]; x < -87.3 gives exactly 0, NaN propagates.
// (Same helper as in attention.cpp.)
inline float exp_vec(float x) {
  constexpr float kLo = -87.3f, kHi = 88.3f;
  float xc = x < kLo ? kLo : (x > kHi ? kHi : x);
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float t = xc * 1.44269504088896341f + kMagic;
  float n = t - kMagic;
  uint32_t ni = std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kMagic);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  float scale = std::bit_cast<float>((ni + 127u) << 23);
  float y = p * scale;
  return x < kLo ? 0.0f : y;
}

}  // namespace

void softmax_cross_entropy(float* logits, float* losses, const int32_t* targets, int N, int V,
                           float grad_scale) {
  // Validate before touching anything (and outside the parallel region, where a throw
  // would terminate).
  for (int n = 0; n < N; ++n) {
    NDT_CHECK(targets[n] >= 0 && targets[n] < V,
              "softmax_cross_entropy: target {} of row {} is outside [0, {})", targets[n], n, V);
  }
  const bool with_grad = grad_scale != 0.0f;

  // Small calls stay on the calling thread: a fork/join costs more than they do.
  const bool parallel = static_cast<int64_t>(N) * V >= (int64_t{1} << 15) && N > 1;

#pragma omp parallel for schedule(static) if (parallel)
  for (int n = 0; n < N; ++n) {
    float* row = logits + static_cast<int64_t>(n) * V;
    const int target = targets[n];
    const float target_logit = row[target];
    // (This form vectorises; std::max from j = 1 stays scalar with GCC 12.)
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < V; ++j) mx = row[j] > mx ? row[j] : mx;

    double sum = 0.0;
    if (with_grad) {
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j < V; ++j) {
        float e = exp_vec(row[j] - mx);
        row[j] = e;
        sum += e;
      }
    } else {
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j < V; ++j) sum += exp_vec(row[j] - mx);
    }
    losses[n] = static_cast<float>(static_cast<double>(mx) + std::log(sum) -
                                   static_cast<double>(target_logit));
    if (with_grad) {
      const float f = static_cast<float>(grad_scale / sum);
#pragma omp simd
      for (int j = 0; j < V; ++j) row[j] *= f;
      row[target] -= grad_scale;
    }
  }
}

}  // namespace ndt::cpu
