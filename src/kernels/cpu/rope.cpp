// Rotary position embedding, "rotate half" (HF Llama) pairing. Angles are computed in
// double from pos * theta^(-2i/D) and rounded once to float cos/sin, so large
// positions keep full float accuracy. One table of T x D/2 (cos, sin) per call.
#include "kernels/cpu/rope.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace ndt::cpu {
namespace {

// Below this many elements the loops run on the calling thread (no fork/join cost).
constexpr int64_t kParallelMin = int64_t{1} << 14;

// cs[(t * half + i) * 2 + {0,1}] = {cos, sin} of position(t) * theta^(-2i/D), where
// position(t) = positions[t], or pos_offset + t without positions.
std::vector<float> rope_table(int T, int D, int pos_offset, const int32_t* positions, float theta) {
  const int half = D / 2;
  std::vector<float> cs(static_cast<size_t>(T) * half * 2);
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(static_cast<double>(theta), -2.0 * i / D);
#pragma omp parallel for schedule(static) if (static_cast<int64_t>(T) * D >= kParallelMin)
  for (int t = 0; t < T; ++t) {
    const double pos = positions ? static_cast<double>(positions[t]) : static_cast<double>(pos_offset) + t;
    for (int i = 0; i < half; ++i) {
      double angle = pos * inv_freq[i];
      size_t k = (static_cast<size_t>(t) * half + i) * 2;
      cs[k] = static_cast<float>(std::cos(angle));
      cs[k + 1] = static_cast<float>(std::sin(angle));
    }
  }
  return cs;
}

}  // namespace

namespace {

// Rotates every (i, i + D/2) pair of x by +angle (forward) or -angle (backward, the
// transpose of the rotation); writes `out` or, when accumulating, adds into it.
// Each pair is read before either element is written, so out == x is safe.
template <bool kInverse, bool kAccumulate>
void rotate_pairs(float* out, const float* x_all, int B, int T, int H, int D, int pos_offset,
                  const int32_t* positions, float theta) {
  const int half = D / 2;
  const std::vector<float> cs = rope_table(T, D, pos_offset, positions, theta);
#pragma omp parallel for collapse(2) schedule(static) \
    if (static_cast<int64_t>(B) * T * H * D >= kParallelMin)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const float* tab = cs.data() + static_cast<size_t>(t) * half * 2;
      for (int h = 0; h < H; ++h) {
        const int64_t base = ((static_cast<int64_t>(b) * T + t) * H + h) * D;
        const float* x = x_all + base;
        float* o = out + base;
#pragma omp simd
        for (int i = 0; i < half; ++i) {
          const float c = tab[2 * i], s = kInverse ? -tab[2 * i + 1] : tab[2 * i + 1];
          const float x1 = x[i], x2 = x[i + half];
          const float r1 = x1 * c - x2 * s, r2 = x2 * c + x1 * s;
          if constexpr (kAccumulate) {
            o[i] += r1;
            o[i + half] += r2;
          } else {
            o[i] = r1;
            o[i + half] = r2;
          }
        }
      }
    }
  }
}

}  // namespace

void rope_forward(float* out, const float* inp, int B, int T, int H, int D, int pos_offset, float theta) {
  rotate_pairs<false, false>(out, inp, B, T, H, D, pos_offset, nullptr, theta);
}

void rope_forward_at(float* out, const float* inp, int B, int T, int H, int D, const int32_t* positions,
                     float theta) {
  rotate_pairs<false, false>(out, inp, B, T, H, D, 0, positions, theta);
}

// The forward map is a rotation per pair; its transpose (the inverse rotation) maps
// dout to dinp.
void rope_backward(float* dinp, const float* dout, int B, int T, int H, int D, int pos_offset, float theta) {
  rotate_pairs<true, true>(dinp, dout, B, T, H, D, pos_offset, nullptr, theta);
}

void rope_backward_at(float* dinp, const float* dout, int B, int T, int H, int D, const int32_t* positions,
                      float theta) {
  rotate_pairs<true, true>(dinp, dout, B, T, H, D, 0, positions, theta);
}

}  // namespace ndt::cpu
