// Rotary position embedding, "rotate half" (HF Llama) pairing. Angles are computed in
// double from pos * theta^(-2i/D) and rounded once to float cos/sin, so large
// positions keep full float accuracy. One table of D/2 (cos, sin) per position per
// call: T positions, or for the _at forms each distinct position of the rows (at most T
// when every sequence has the same positions or restarts them at document starts).
#include "kernels/cpu/rope.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

namespace ndt::cpu {
namespace {

// Below this many elements the loops run on the calling thread (no fork/join cost).
constexpr int64_t kParallelMin = int64_t{1} << 14;

// cs[(t * half + i) * 2 + {0,1}] = {cos, sin} of position(t) * inverse frequency i (rope_inverse_frequencies), where
// position(t) = positions[t], or pos_offset + t without positions.
std::vector<float> rope_table(int T, int D, int pos_offset, const int32_t* positions, const RopeFrequencies& f) {
  const int half = D / 2;
  std::vector<float> cs(static_cast<size_t>(T) * half * 2);
  const std::vector<double> inv_freq = rope_inverse_frequencies(D, f);
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

// The positions of rows [0, n): the distinct ones in the order first seen (the table's
// entries) and each row's entry.
struct PositionEntries {
  std::vector<int32_t> distinct;
  std::vector<int32_t> of_row;
};

PositionEntries position_entries(const int32_t* positions, int64_t n) {
  int32_t largest = -1;
  for (int64_t i = 0; i < n; ++i) {
    NDT_CHECK(positions[i] >= 0, "rope: position {} of row {} is negative", positions[i], i);
    largest = std::max(largest, positions[i]);
  }
  std::vector<int32_t> entry(static_cast<size_t>(largest) + 1, -1);
  PositionEntries e;
  e.of_row.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int32_t& slot = entry[static_cast<size_t>(positions[i])];
    if (slot < 0) {
      slot = static_cast<int32_t>(e.distinct.size());
      e.distinct.push_back(positions[i]);
    }
    e.of_row[static_cast<size_t>(i)] = slot;
  }
  return e;
}

// Rotates every (i, i + D/2) pair of x by +angle (forward) or -angle (backward, the
// transpose of the rotation); writes `out` or, when accumulating, adds into it. Row t
// of sequence b takes table entry of_row[b x T + t], or entry t when of_row is null.
// Each pair is read before either element is written, so out == x is safe.
template <bool kInverse, bool kAccumulate>
void rotate_pairs(float* out, const float* x_all, int B, int T, int H, int D, const std::vector<float>& cs,
                  const int32_t* of_row) {
  const int half = D / 2;
#pragma omp parallel for collapse(2) schedule(static) \
    if (static_cast<int64_t>(B) * T * H * D >= kParallelMin)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const int64_t entry = of_row ? of_row[static_cast<int64_t>(b) * T + t] : t;
      const float* tab = cs.data() + static_cast<size_t>(entry) * half * 2;
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

// rotate_pairs at positions pos_offset + t, or at positions[B, T].
template <bool kInverse, bool kAccumulate>
void rotate(float* out, const float* x, int B, int T, int H, int D, int pos_offset, const int32_t* positions,
            const RopeFrequencies& frequencies) {
  if (!positions) {
    rotate_pairs<kInverse, kAccumulate>(out, x, B, T, H, D, rope_table(T, D, pos_offset, nullptr, frequencies), nullptr);
    return;
  }
  const PositionEntries e = position_entries(positions, static_cast<int64_t>(B) * T);
  const std::vector<float> cs = rope_table(static_cast<int>(e.distinct.size()), D, 0, e.distinct.data(), frequencies);
  rotate_pairs<kInverse, kAccumulate>(out, x, B, T, H, D, cs, e.of_row.data());
}

}  // namespace

std::vector<double> rope_inverse_frequencies(int D, const RopeFrequencies& f) {
  const int half = D / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(static_cast<double>(f.theta), -2.0 * i / D);
  if (f.scaling_factor <= 0) return inv_freq;
  const double factor = f.scaling_factor, low = f.low_freq_factor, high = f.high_freq_factor;
  const double original = f.original_max_seq_len;
  for (double& freq : inv_freq) {
    const double wavelength = 2 * std::numbers::pi / freq;
    if (wavelength > original / low) {
      freq /= factor;
    } else if (wavelength >= original / high) {  // between: interpolate
      const double s = (original / wavelength - low) / (high - low);
      freq = (1 - s) * freq / factor + s * freq;
    }
  }
  return inv_freq;
}

void rope_forward(float* out, const float* inp, int B, int T, int H, int D, int pos_offset,
                  const RopeFrequencies& frequencies) {
  rotate<false, false>(out, inp, B, T, H, D, pos_offset, nullptr, frequencies);
}

void rope_forward_at(float* out, const float* inp, int B, int T, int H, int D, const int32_t* positions,
                     const RopeFrequencies& frequencies) {
  rotate<false, false>(out, inp, B, T, H, D, 0, positions, frequencies);
}

// The forward map is a rotation per pair; its transpose (the inverse rotation) maps
// dout to dinp.
void rope_backward(float* dinp, const float* dout, int B, int T, int H, int D, int pos_offset,
                   const RopeFrequencies& frequencies) {
  rotate<true, true>(dinp, dout, B, T, H, D, pos_offset, nullptr, frequencies);
}

void rope_backward_at(float* dinp, const float* dout, int B, int T, int H, int D, const int32_t* positions,
                      const RopeFrequencies& frequencies) {
  rotate<true, true>(dinp, dout, B, T, H, D, 0, positions, frequencies);
}

}  // namespace ndt::cpu
