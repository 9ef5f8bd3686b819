// Low-precision attention on the CPU, flash-style, on blocks of kRowBlock query rows.
//
// Layout. The spans' q, k, v (and dout) are first copied to dtype, regrouped by key/value
// head: q as [B * NKV][rows][group][HS] (a KV head's query heads side by side), k and v as
// [B * NKV][rows][HS]. A row block of `rows` query rows is then, for each of the B * NKV
// batches, one matrix of rows x group rows against the block's keys, so every product of
// a block is ONE batched gemm_lowp call over all sequences and heads (grouped heads
// included: dK and dV sum over the group inside the product).
//
// Forward, per row block: S = Q K^T (fp32 sums), then per row in fp32 the scaled scores'
// softmax over the row's visible keys and its lse; P rounded to dtype; O = P V. Backward,
// per row block: S again, P = exp(scale S - lse) (the merged lse normalises over all
// keys, no row maximum is needed), dV += P^T dO, dP = dO V^T, dS = P o (dP - D) scale,
// dQ = dS K, dK += dS^T Q; dQ, dK, dV are summed in fp32 buffers of their own and added
// into the caller's at the end. Scratch (the kernel's own): the dtype copies, one row
// block's scores and probabilities (and dP) for all batches, and the backward's sums.
//
// Causality: a row block computes only the union of its rows' key windows (SpanMask),
// taken over all sequences (they share one batched product): blocks above the diagonal
// are skipped; with document starts the block begins at the smallest start of any
// sequence's rows, and each row's softmax covers its own window only.
#include "kernels/cpu/attention_lowp.h"

#include "kernels/cpu/attention_span_mask.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/gemm_lowp.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace ndt::cpu {
namespace {

constexpr int kRowBlock = 64;
// Elements below which a loop of this file runs on the calling thread.
constexpr int64_t kParallelMin = int64_t{1} << 15;

void check_dtype(const char* kernel, DType dtype) {
  NDT_CHECK(dtype == DType::bf16 || dtype == DType::f16, "{}: dtype must be bf16 or f16, got {}", kernel,
            dtype_name(dtype));
}

// The shapes of one call: the spans' rows regrouped by key/value head.
struct Grouped {
  int B, Tq, Tk, NH, NKV, G, HS;
  AttentionSpan qs, ks;
  int batches() const { return B * NKV; }
  int64_t q_stride() const { return int64_t{qs.count} * G * HS; }  // one batch of q, dout, dq
  int64_t k_stride() const { return int64_t{ks.count} * HS; }      // one batch of k, v, dk, dv
};

// dst [B * NKV][s.count][heads][HS] (dtype) = the rows of span s of x [B, T, NKV * heads, HS].
void gather(DType dtype, uint16_t* dst, const float* x, int B, int T, int NKV, int heads, int HS,
            const AttentionSpan& s) {
  const int64_t width = int64_t{heads} * HS, rows = int64_t{B} * NKV * s.count;
#pragma omp parallel for schedule(static) if (rows * width >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t bk = r / s.count, i = r % s.count, b = bk / NKV, kvh = bk % NKV;
    cast_to_lowp(dtype, x + ((b * T + s.begin + i) * NKV + kvh) * width, dst + r * width, width);
  }
}

// The rows of span s of x [B, T, NKV * heads, HS] += src [B * NKV][s.count][heads][HS].
void scatter_add(float* x, const float* src, int B, int T, int NKV, int heads, int HS, const AttentionSpan& s) {
  const int64_t width = int64_t{heads} * HS, rows = int64_t{B} * NKV * s.count;
#pragma omp parallel for schedule(static) if (rows * width >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t bk = r / s.count, i = r % s.count, b = bk / NKV, kvh = bk % NKV;
    float* row = x + ((b * T + s.begin + i) * NKV + kvh) * width;
    const float* add = src + r * width;
#pragma omp simd
    for (int64_t e = 0; e < width; ++e) row[e] += add[e];
  }
}

// Where row n of a row block's [B * NKV][rows][G] rows (block starting at query row r0)
// comes from: sequence b, head h, query row i of the span.
struct BlockRow {
  int b, h, i;
};
BlockRow block_row(const Grouped& g, int r0, int rows, int64_t n) {
  const int64_t m = n % (int64_t{rows} * g.G), bk = n / (int64_t{rows} * g.G);
  return {static_cast<int>(bk / g.NKV), static_cast<int>(bk % g.NKV) * g.G + static_cast<int>(m % g.G),
          r0 + static_cast<int>(m / g.G)};
}

// The keys the query rows [r0, r1) of any sequence see (one window for the batched product).
KeyWindow block_keys(const int32_t* starts, const Grouped& g, int r0, int r1) {
  KeyWindow w{g.ks.count, 0};
  for (int b = 0; b < g.B; ++b) {
    const KeyWindow k = span_mask(starts, b, g.Tq, g.qs, g.ks).block(r0, r1);
    if (!k.empty()) w = {std::min(w.lo, k.lo), std::max(w.hi, k.hi)};
  }
  return w;
}

// Row i of the query span's window in the block's columns, for sequence b.
KeyWindow row_columns(const int32_t* starts, const Grouped& g, const BlockRow& r, const KeyWindow& keys) {
  return span_mask(starts, r.b, g.Tq, g.qs, g.ks).columns(r.i, keys);
}

int64_t lse_index(const Grouped& g, const BlockRow& r) {
  return (int64_t{r.b} * g.NH + r.h) * g.Tq + g.qs.begin + r.i;
}

// One row block's products, all batches in one call each. Q-side matrices (q, dout, dq)
// start at the block's first row; K-side ones (k, v, dk, dv) at the window's first key.
struct BlockProducts {
  DType dtype;
  const Grouped& g;
  int r0, M, nblk;
  KeyWindow keys;
  int64_t q_offset() const { return int64_t{r0} * g.G * g.HS; }
  int64_t k_offset() const { return int64_t{keys.lo} * g.HS; }
  // S[M, nblk] = Q K^T (or dP = dO V^T)
  void scores(float* s, const uint16_t* qside, const uint16_t* kside) const {
    gemm_lowp_batched(dtype, g.batches(), false, true, M, nblk, g.HS, qside + q_offset(), g.HS, g.q_stride(),
                      kside + k_offset(), g.HS, g.k_stride(), 0.0f, s, nblk, int64_t{M} * nblk);
  }
  // out[M, HS] = P V or dS K, out's batches `stride` apart
  void rows_times_keys(float* out, int64_t stride, const uint16_t* p, const uint16_t* kside) const {
    gemm_lowp_batched(dtype, g.batches(), false, false, M, g.HS, nblk, p, nblk, int64_t{M} * nblk,
                      kside + k_offset(), g.HS, g.k_stride(), 0.0f, out, g.HS, stride);
  }
  // K-side[nblk, HS] += P^T dO or dS^T Q
  void keys_from_rows(float* kside, const uint16_t* p, const uint16_t* qside) const {
    gemm_lowp_batched(dtype, g.batches(), true, false, nblk, g.HS, M, p, nblk, int64_t{M} * nblk,
                      qside + q_offset(), g.HS, g.q_stride(), 1.0f, kside + k_offset(), g.HS, g.k_stride());
  }
};

// Runs f(r, c, n) for each row n of a row block's [B * NKV][M] rows, in parallel: r says
// where the row comes from, c is its key window in the block's columns.
template <class F>
void for_each_row(const BlockProducts& blk, const int32_t* starts, F f) {
  const int64_t n_rows = int64_t{blk.g.batches()} * blk.M;
  const int rows = blk.M / blk.g.G;
#pragma omp parallel for schedule(static) if (n_rows * blk.nblk >= kParallelMin)
  for (int64_t n = 0; n < n_rows; ++n) {
    const BlockRow r = block_row(blk.g, blk.r0, rows, n);
    f(r, row_columns(starts, blk.g, r, blk.keys), n);
  }
}

// Zeroes row[0, nblk) outside the window c and writes its dtype bits to p.
void finish_row(DType dtype, float* row, int nblk, const KeyWindow& c, uint16_t* p) {
  std::fill(row, row + c.lo, 0.0f);
  std::fill(row + std::max(c.lo, c.hi), row + nblk, 0.0f);
  cast_to_lowp(dtype, row, p, nblk);
}

// The forward's per-row step: softmax of the scaled scores over the row's window (fp32),
// lse, and P rounded to dtype (0 outside the window).
void softmax_rows(const BlockProducts& blk, const int32_t* starts, float scale, float* s, uint16_t* p, float* lse) {
  const int nblk = blk.nblk;
  for_each_row(blk, starts, [&](const BlockRow& r, const KeyWindow& c, int64_t n) {
    float* row = s + n * nblk;
#pragma omp simd
    for (int j = c.lo; j < c.hi; ++j) row[j] *= scale;
    lse[lse_index(blk.g, r)] = c.empty() ? kNegInf : softmax_row(row + c.lo, c.hi - c.lo);
    finish_row(blk.dtype, row, nblk, c, p + n * nblk);
  });
}

// The backward's first per-row step: P = exp(scale S - lse) on the row's window (0
// elsewhere, and for a row whose lse is -inf), kept in fp32 in s and rounded into p.
void recompute_probabilities(const BlockProducts& blk, const int32_t* starts, float scale, const float* lse,
                             float* s, uint16_t* p) {
  const int nblk = blk.nblk;
  for_each_row(blk, starts, [&](const BlockRow& r, const KeyWindow& window, int64_t n) {
    const float l = lse[lse_index(blk.g, r)];
    const KeyWindow c = l == kNegInf ? KeyWindow{} : window;
    float* row = s + n * nblk;
#pragma omp simd
    for (int j = c.lo; j < c.hi; ++j) row[j] = exp_vec(row[j] * scale - l);
    finish_row(blk.dtype, row, nblk, c, p + n * nblk);
  });
}

// The backward's second per-row step: dS = P o (dP - D) scale on the row's window, rounded
// into ds (0 elsewhere).
void score_gradients(const BlockProducts& blk, const int32_t* starts, float scale, const float* D, const float* p,
                     float* dp, uint16_t* ds) {
  const int nblk = blk.nblk;
  for_each_row(blk, starts, [&](const BlockRow& r, const KeyWindow& c, int64_t n) {
    const float dot = D[lse_index(blk.g, r)];
    const float* prow = p + n * nblk;
    float* row = dp + n * nblk;
#pragma omp simd
    for (int j = c.lo; j < c.hi; ++j) row[j] = prow[j] * (row[j] - dot) * scale;
    finish_row(blk.dtype, row, nblk, c, ds + n * nblk);
  });
}

// Rows [r0, r1) of the query span see no key in any sequence: out 0, lse -inf.
void write_no_key(float* out, float* lse, const Grouped& g, int r0, int r1) {
  for (int b = 0; b < g.B; ++b) {
    for (int h = 0; h < g.NH; ++h) {
      for (int i = r0; i < r1; ++i) {
        std::fill_n(out + ((int64_t{b} * g.Tq + g.qs.begin + i) * g.NH + h) * g.HS, g.HS, 0.0f);
        lse[(int64_t{b} * g.NH + h) * g.Tq + g.qs.begin + i] = kNegInf;
      }
    }
  }
}

// The rows [r0, r0 + rows) of the query span of out [B, Tq, NH, HS] = o [B * NKV][rows][G][HS].
void write_rows(float* out, const float* o, const Grouped& g, int r0, int rows) {
  const int64_t width = int64_t{g.G} * g.HS, n = int64_t{g.batches()} * rows;
#pragma omp parallel for schedule(static) if (n * width >= kParallelMin)
  for (int64_t r = 0; r < n; ++r) {
    const int64_t bk = r / rows, i = r % rows, b = bk / g.NKV, kvh = bk % g.NKV;
    std::copy_n(o + r * width, width, out + ((b * g.Tq + g.qs.begin + r0 + i) * g.NKV + kvh) * width);
  }
}

Grouped grouped(int B, int Tq, int Tk, int NH, int NKV, int HS, AttentionSpan qs, AttentionSpan ks) {
  return {B, Tq, Tk, NH, NKV, NH / NKV, HS, qs, ks};
}

}  // namespace

void attention_span_forward_lowp(DType dtype, float* out, float* lse, const float* q, const float* k, const float* v,
                                 const int32_t* starts, int B, int Tq, int Tk, int NH, int NKV, int HS,
                                 AttentionSpan qs, AttentionSpan ks) {
  const char* kernel = "attention_span_forward_lowp";
  check_dtype(kernel, dtype);
  check_pair(kernel, starts, B, Tq, Tk, NH, NKV, HS, qs, ks);
  if (B == 0 || qs.count == 0) return;
  const Grouped g = grouped(B, Tq, Tk, NH, NKV, HS, qs, ks);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  std::vector<uint16_t> qh(static_cast<size_t>(g.batches() * g.q_stride()));
  std::vector<uint16_t> kh(static_cast<size_t>(g.batches() * g.k_stride())), vh(kh.size());
  gather(dtype, qh.data(), q, B, Tq, NKV, g.G, HS, qs);
  gather(dtype, kh.data(), k, B, Tk, NKV, 1, HS, ks);
  gather(dtype, vh.data(), v, B, Tk, NKV, 1, HS, ks);
  const int64_t block_rows = int64_t{g.batches()} * std::min(qs.count, kRowBlock) * g.G;
  std::vector<float> s(static_cast<size_t>(block_rows * ks.count)), o(static_cast<size_t>(block_rows * HS));
  std::vector<uint16_t> p(s.size());

  for (int r0 = 0; r0 < qs.count; r0 += kRowBlock) {
    const int r1 = std::min(qs.count, r0 + kRowBlock), rows = r1 - r0;
    const KeyWindow keys = block_keys(starts, g, r0, r1);
    if (keys.empty()) {
      write_no_key(out, lse, g, r0, r1);
      continue;
    }
    const BlockProducts blk{dtype, g, r0, rows * g.G, keys.hi - keys.lo, keys};
    blk.scores(s.data(), qh.data(), kh.data());
    softmax_rows(blk, starts, scale, s.data(), p.data(), lse);
    blk.rows_times_keys(o.data(), int64_t{blk.M} * HS, p.data(), vh.data());
    write_rows(out, o.data(), g, r0, rows);
  }
}

void attention_span_backward_recompute_lowp(DType dtype, float* dq, float* dk, float* dv, const float* dout,
                                            const float* q, const float* k, const float* v, const float* lse,
                                            const float* D, const int32_t* starts, int B, int Tq, int Tk, int NH,
                                            int NKV, int HS, AttentionSpan qs, AttentionSpan ks) {
  const char* kernel = "attention_span_backward_recompute_lowp";
  check_dtype(kernel, dtype);
  check_pair(kernel, starts, B, Tq, Tk, NH, NKV, HS, qs, ks);
  if (B == 0 || qs.count == 0 || ks.count == 0) return;
  const Grouped g = grouped(B, Tq, Tk, NH, NKV, HS, qs, ks);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const size_t qsize = static_cast<size_t>(g.batches() * g.q_stride()), ksize = static_cast<size_t>(g.batches() * g.k_stride());
  std::vector<uint16_t> qh(qsize), doh(qsize), kh(ksize), vh(ksize);
  gather(dtype, qh.data(), q, B, Tq, NKV, g.G, HS, qs);
  gather(dtype, doh.data(), dout, B, Tq, NKV, g.G, HS, qs);
  gather(dtype, kh.data(), k, B, Tk, NKV, 1, HS, ks);
  gather(dtype, vh.data(), v, B, Tk, NKV, 1, HS, ks);
  // The gradients' fp32 sums over this call, added into the caller's at the end.
  std::vector<float> dq_sum(qsize, 0.0f), dk_sum(ksize, 0.0f), dv_sum(ksize, 0.0f);
  const int64_t block_rows = int64_t{g.batches()} * std::min(qs.count, kRowBlock) * g.G;
  std::vector<float> p(static_cast<size_t>(block_rows * ks.count)), dp(p.size());
  std::vector<uint16_t> p16(p.size());  // P, then dS, in dtype

  for (int r0 = 0; r0 < qs.count; r0 += kRowBlock) {
    const int r1 = std::min(qs.count, r0 + kRowBlock), rows = r1 - r0;
    const KeyWindow keys = block_keys(starts, g, r0, r1);
    if (keys.empty()) continue;  // no row of the block sees a key: no gradient
    const BlockProducts blk{dtype, g, r0, rows * g.G, keys.hi - keys.lo, keys};
    blk.scores(p.data(), qh.data(), kh.data());
    recompute_probabilities(blk, starts, scale, lse, p.data(), p16.data());
    blk.keys_from_rows(dv_sum.data(), p16.data(), doh.data());  // dV += P^T dO
    blk.scores(dp.data(), doh.data(), vh.data());                // dP = dO V^T
    score_gradients(blk, starts, scale, D, p.data(), dp.data(), p16.data());
    blk.rows_times_keys(dq_sum.data() + blk.q_offset(), g.q_stride(), p16.data(), kh.data());  // dQ = dS K
    blk.keys_from_rows(dk_sum.data(), p16.data(), qh.data());                          // dK += dS^T Q
  }
  scatter_add(dq, dq_sum.data(), B, Tq, NKV, g.G, HS, qs);
  scatter_add(dk, dk_sum.data(), B, Tk, NKV, 1, HS, ks);
  scatter_add(dv, dv_sum.data(), B, Tk, NKV, 1, HS, ks);
}

void attention_forward_lowp(DType dtype, float* out, float* lse, const float* q, const float* k, const float* v,
                            const int32_t* starts, int B, int T, int NH, int NKV, int HS) {
  const AttentionSpan whole{0, T, 0};
  attention_span_forward_lowp(dtype, out, lse, q, k, v, starts, B, T, T, NH, NKV, HS, whole, whole);
}

void attention_backward_lowp(DType dtype, float* dq, float* dk, float* dv, const float* dout, const float* q,
                             const float* k, const float* v, const float* out, const float* lse,
                             const int32_t* starts, int B, int T, int NH, int NKV, int HS) {
  std::vector<float> D(static_cast<size_t>(std::max(0, B * NH * T)));
  if (!D.empty()) attention_row_dot(D.data(), dout, out, B, T, NH, HS);
  const AttentionSpan whole{0, T, 0};
  attention_span_backward_recompute_lowp(dtype, dq, dk, dv, dout, q, k, v, lse, D.data(), starts, B, T, T, NH, NKV,
                                         HS, whole, whole);
}

}  // namespace ndt::cpu
