// exp(x) in plain float arithmetic, so the loops that call it vectorise (glibc's
// vector expf is only declared under -ffast-math). Cephes range reduction and
// polynomial: about 1 ulp relative error on [-87.3, 88.3]; x < -87.3 gives exactly 0
// (the true value is below the normal range), x > 88.3 gives exp(88.3), NaN propagates.
#pragma once

#include <bit>
#include <cstdint>

namespace ndt::cpu {

inline float exp_vec(float x) {
  constexpr float kLo = -87.3f, kHi = 88.3f;
  const float xc = x < kLo ? kLo : (x > kHi ? kHi : x);
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = xc * 1.44269504088896341f + kMagic;
  const float n = t - kMagic;
  const uint32_t ni = std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kMagic);  // n
  // r = x - n ln2 in two parts (Cody-Waite), |r| <= ln2 / 2.
  float r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float scale = std::bit_cast<float>((ni + 127u) << 23);  // 2^n, n in [-126, 127]
  return x < kLo ? 0.0f : p * scale;
}

}  // namespace ndt::cpu
