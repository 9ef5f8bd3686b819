// What the span kernels of attention_span.h share with their low-precision forms
// (attention_lowp.h): the causal / document mask of a (query span, key span) pair as a
// window of keys per row, the fp32 softmax of a row, and the argument checks.
#pragma once

#include "kernels/cpu/attention_span.h"
#include "kernels/cpu/vec_math.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace ndt::cpu {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// How many keys of span ks the query at position p sees.
inline int visible_keys(int64_t p, const AttentionSpan& ks) {
  return static_cast<int>(std::clamp<int64_t>(p - ks.position + 1, 0, ks.count));
}

// Rows [lo, hi) of a key span (lo >= hi: none).
struct KeyWindow {
  int lo = 0, hi = 0;
  bool empty() const { return lo >= hi; }
};

// The keys of span ks that the rows of query span qs see, in one sequence: a row at
// position p whose document starts at s sees the key rows [s - ks.position, n(p)), clamped.
struct SpanMask {
  const int32_t* starts;  // the query span's rows' document starts (null: 0)
  AttentionSpan qs, ks;

  KeyWindow row(int i) const {
    const int64_t s = starts ? starts[i] : 0;
    return {static_cast<int>(std::clamp<int64_t>(s - ks.position, 0, ks.count)),
            visible_keys(int64_t{qs.position} + i, ks)};
  }
  // The union of the windows of rows [r0, r1) that see a key (empty when none does).
  KeyWindow block(int r0, int r1) const {
    KeyWindow w{ks.count, 0};
    for (int i = r0; i < r1; ++i) {
      const KeyWindow r = row(i);
      if (!r.empty()) w = {std::min(w.lo, r.lo), std::max(w.hi, r.hi)};
    }
    return w;
  }
  // Row i's window in the columns of a block computed over `block` ([0, 0) when empty).
  KeyWindow columns(int i, const KeyWindow& block) const {
    const KeyWindow r = row(i);
    return r.empty() ? KeyWindow{} : KeyWindow{r.lo - block.lo, r.hi - block.lo};
  }
};

inline SpanMask span_mask(const int32_t* starts, int b, int Tq, const AttentionSpan& qs, const AttentionSpan& ks) {
  return {starts ? starts + int64_t{b} * Tq + qs.begin : nullptr, qs, ks};
}

// Softmax of row[0, n) in place (n >= 1); returns the row's log-sum-exp.
inline float softmax_row(float* row, int n) {
  float mx = kNegInf;
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < n; ++j) mx = row[j] > mx ? row[j] : mx;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) {
    const float e = exp_vec(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int j = 0; j < n; ++j) row[j] *= inv;
  return mx + std::log(sum);
}

inline void check_rows(const char* kernel, int B, int T, int NH, int HS) {
  NDT_CHECK(B >= 0 && T >= 0 && NH >= 1 && HS >= 1,
            "{}: bad sizes B {}, T {}, NH {}, HS {} (B, T >= 0; NH, HS >= 1)", kernel, B, T, NH,
            HS);
}

inline void check_span(const char* kernel, const char* what, const AttentionSpan& s, int T) {
  NDT_CHECK(s.begin >= 0 && s.count >= 0 && int64_t{s.begin} + s.count <= T,
            "{}: {} span (begin {}, count {}) does not fit in the {} rows [0, {})", kernel, what,
            s.begin, s.count, T, T);
}

// Everything the forward and backward of a span pair share.
inline void check_pair(const char* kernel, const int32_t* starts, int B, int Tq, int Tk, int NH, int NKV,
                int HS, const AttentionSpan& qs, const AttentionSpan& ks) {
  check_rows(kernel, B, Tq, NH, HS);
  NDT_CHECK(Tk >= 0, "{}: bad key rows Tk {}", kernel, Tk);
  NDT_CHECK(NKV >= 1 && NH % NKV == 0,
            "{}: query heads ({}) must be a multiple of key/value heads ({})", kernel, NH, NKV);
  check_span(kernel, "query", qs, Tq);
  check_span(kernel, "key", ks, Tk);
  if (!starts) return;
  for (int b = 0; b < B; ++b) {
    for (int i = 0; i < qs.count; ++i) {
      const int64_t s = starts[int64_t{b} * Tq + qs.begin + i], p = int64_t{qs.position} + i;
      NDT_CHECK(s >= 0 && s <= p, "{}: document start {} of the query at position {} (sequence {}) is outside [0, {}]",
                kernel, s, p, b, p);
    }
  }
}

inline int64_t pair_work(int B, int NH, int HS, const AttentionSpan& qs, const AttentionSpan& ks) {
  return int64_t{B} * NH * qs.count * ks.count * HS;
}

}  // namespace ndt::cpu
