// Low-precision attention on the CPU, flash-style, on blocks of kRowBlock query rows.
//
// Layout. The spans' q, k, v (and dout) are first copied to dtype, regrouped by key/value
// head: each row block of q as [B * NKV][rows][group][HS] (a KV head's query heads side
// by side), k and v as [B * NKV][rows][HS], and each block's key window copied dense. A
// row block of `rows` query rows is then, for each of the B * NKV batches, one matrix of
// rows x group rows against the window's keys, so every product of a block is ONE
// batched gemm_lowp call over all sequences and heads on dense batches (grouped heads
// included: dK and dV sum over the group inside the product). Dense, because oneDNN runs
// a dense batch on its AMX / AVX512-BF16 brgemm and a strided one on a slower jit gemm.
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
};

// The rows of one span of a [B, T, NKV * heads, HS] tensor, regrouped: cut into blocks of
// `block` rows, each block [B * NKV][its rows][heads][HS], the blocks one after the other.
// So a block is a dense batch of matrices; with block = the span's count, the whole span
// as [B * NKV][count][heads][HS].
struct Regrouped {
  int B, T, NKV, heads, HS;
  AttentionSpan s;
  int block;
  int64_t width() const { return int64_t{heads} * HS; }
  // Where row i of the span of sequence b, key/value head kvh lives in the source and here.
  int64_t source(int64_t b, int64_t kvh, int64_t i) const { return ((b * T + s.begin + i) * NKV + kvh) * width(); }
  int64_t offset(int64_t bk, int64_t i) const {
    const int64_t first = i / block * block, rows = std::min<int64_t>(block, s.count - first);
    return (first * B * NKV + bk * rows + i - first) * width();
  }
  int64_t rows() const { return int64_t{B} * NKV * s.count; }
};

// dst (dtype) = the rows of r.s of x, regrouped.
void gather(DType dtype, uint16_t* dst, const float* x, const Regrouped& r) {
  const int64_t width = r.width();
#pragma omp parallel for schedule(static) if (r.rows() * width >= kParallelMin)
  for (int64_t n = 0; n < r.rows(); ++n) {
    const int64_t bk = n / r.s.count, i = n % r.s.count;
    cast_to_lowp(dtype, x + r.source(bk / r.NKV, bk % r.NKV, i), dst + r.offset(bk, i), width);
  }
}

// The rows of r.s of x += src (regrouped).
void scatter_add(float* x, const float* src, const Regrouped& r) {
  const int64_t width = r.width();
#pragma omp parallel for schedule(static) if (r.rows() * width >= kParallelMin)
  for (int64_t n = 0; n < r.rows(); ++n) {
    const int64_t bk = n / r.s.count, i = n % r.s.count;
    float* row = x + r.source(bk / r.NKV, bk % r.NKV, i);
    const float* add = src + r.offset(bk, i);
#pragma omp simd
    for (int64_t e = 0; e < width; ++e) row[e] += add[e];
  }
}

// dst [B * NKV][keys][HS] = the window's rows of src [B * NKV][ks.count][HS] (dense for
// the products).
void copy_window(uint16_t* dst, const uint16_t* src, const Grouped& g, const KeyWindow& keys) {
  const int64_t n = int64_t{keys.hi - keys.lo} * g.HS;
  for (int64_t bk = 0; bk < g.batches(); ++bk) {
    std::copy_n(src + (bk * g.ks.count + keys.lo) * g.HS, n, dst + bk * n);
  }
}

// The window's rows of sum [B * NKV][ks.count][HS] += add [B * NKV][keys][HS].
void add_window(float* sum, const float* add, const Grouped& g, const KeyWindow& keys) {
  const int64_t n = int64_t{keys.hi - keys.lo} * g.HS;
#pragma omp parallel for schedule(static) if (g.batches() * n >= kParallelMin)
  for (int64_t bk = 0; bk < g.batches(); ++bk) {
    float* row = sum + (bk * g.ks.count + keys.lo) * g.HS;
    const float* a = add + bk * n;
#pragma omp simd
    for (int64_t e = 0; e < n; ++e) row[e] += a[e];
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

// One row block's products, all batches in one call each, on dense batches: the block's
// query-side rows (q, dout, dq) [B * NKV][M][HS], its window's keys (k, v, dk, dv)
// [B * NKV][nblk][HS], scores and probabilities [B * NKV][M][nblk].
struct BlockProducts {
  DType dtype;
  const Grouped& g;
  int r0, M, nblk;
  KeyWindow keys;
  int64_t q_size() const { return int64_t{M} * g.HS; }
  int64_t k_size() const { return int64_t{nblk} * g.HS; }
  int64_t s_size() const { return int64_t{M} * nblk; }
  // S = Q K^T (or dP = dO V^T)
  void scores(float* s, const uint16_t* q, const uint16_t* k) const {
    gemm_lowp_batched(dtype, g.batches(), false, true, M, nblk, g.HS, q, g.HS, q_size(), k, g.HS, k_size(), 0.0f, s,
                      nblk, s_size());
  }
  // out[M, HS] = P V (or dQ = dS K)
  void rows_times_keys(float* out, const uint16_t* p, const uint16_t* k) const {
    gemm_lowp_batched(dtype, g.batches(), false, false, M, g.HS, nblk, p, nblk, s_size(), k, g.HS, k_size(), 0.0f,
                      out, g.HS, q_size());
  }
  // out[nblk, HS] = P^T dO (or dS^T Q)
  void keys_from_rows(float* out, const uint16_t* p, const uint16_t* q) const {
    gemm_lowp_batched(dtype, g.batches(), true, false, nblk, g.HS, M, p, nblk, s_size(), q, g.HS, q_size(), 0.0f, out,
                      g.HS, k_size());
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

// q, k and v of a call in dtype, regrouped: q in row blocks of kRowBlock, k and v whole.
struct Operands {
  Regrouped rows, keys;
  std::vector<uint16_t> q, k, v;
  Operands(DType dtype, const Grouped& g, const float* q_in, const float* k_in, const float* v_in)
      : rows{g.B, g.Tq, g.NKV, g.G, g.HS, g.qs, kRowBlock},
        keys{g.B, g.Tk, g.NKV, 1, g.HS, g.ks, std::max(1, g.ks.count)},
        q(static_cast<size_t>(rows.rows() * rows.width())),
        k(static_cast<size_t>(keys.rows() * keys.width())),
        v(k.size()) {
    gather(dtype, q.data(), q_in, rows);
    gather(dtype, k.data(), k_in, keys);
    gather(dtype, v.data(), v_in, keys);
  }
  // The row block starting at query row r0 of x (regrouped as q): [B * NKV][its rows][G][HS].
  const uint16_t* query_rows(const std::vector<uint16_t>& x, int r0) const { return x.data() + rows.offset(0, r0); }
};

}  // namespace

void attention_span_forward_lowp(DType dtype, float* out, float* lse, const float* q, const float* k, const float* v,
                                 const int32_t* starts, int B, int Tq, int Tk, int NH, int NKV, int HS,
                                 AttentionSpan qs, AttentionSpan ks) {
  const char* kernel = "attention_span_forward_lowp";
  check_dtype(kernel, dtype);
  check_pair(kernel, starts, B, Tq, Tk, NH, NKV, HS, qs, ks);
  if (B == 0 || qs.count == 0) return;
  const Grouped g = grouped(B, Tq, Tk, NH, NKV, HS, qs, ks);
  const Operands ops(dtype, g, q, k, v);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int64_t block_rows = int64_t{g.batches()} * std::min(qs.count, kRowBlock) * g.G;
  std::vector<float> s(static_cast<size_t>(block_rows * ks.count)), o(static_cast<size_t>(block_rows * HS));
  std::vector<uint16_t> p(s.size()), kw(ops.k.size()), vw(ops.v.size());

  for (int r0 = 0; r0 < qs.count; r0 += kRowBlock) {
    const int r1 = std::min(qs.count, r0 + kRowBlock), rows = r1 - r0;
    const KeyWindow keys = block_keys(starts, g, r0, r1);
    if (keys.empty()) {
      write_no_key(out, lse, g, r0, r1);
      continue;
    }
    const BlockProducts blk{dtype, g, r0, rows * g.G, keys.hi - keys.lo, keys};
    copy_window(kw.data(), ops.k.data(), g, keys);
    copy_window(vw.data(), ops.v.data(), g, keys);
    blk.scores(s.data(), ops.query_rows(ops.q, r0), kw.data());
    softmax_rows(blk, starts, scale, s.data(), p.data(), lse);
    blk.rows_times_keys(o.data(), p.data(), vw.data());
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
  const Operands ops(dtype, g, q, k, v);
  std::vector<uint16_t> doh(ops.q.size());
  gather(dtype, doh.data(), dout, ops.rows);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  // The gradients' fp32 sums over this call (regrouped), added into the caller's at the end.
  std::vector<float> dq_sum(ops.q.size(), 0.0f), dk_sum(ops.k.size(), 0.0f), dv_sum(ops.k.size(), 0.0f);
  const int64_t block_rows = int64_t{g.batches()} * std::min(qs.count, kRowBlock) * g.G;
  std::vector<float> p(static_cast<size_t>(block_rows * ks.count)), dp(p.size()), dkv(ops.k.size());
  std::vector<uint16_t> p16(p.size()), kw(ops.k.size()), vw(ops.k.size());  // p16: P, then dS, in dtype

  for (int r0 = 0; r0 < qs.count; r0 += kRowBlock) {
    const int r1 = std::min(qs.count, r0 + kRowBlock), rows = r1 - r0;
    const KeyWindow keys = block_keys(starts, g, r0, r1);
    if (keys.empty()) continue;  // no row of the block sees a key: no gradient
    const BlockProducts blk{dtype, g, r0, rows * g.G, keys.hi - keys.lo, keys};
    copy_window(kw.data(), ops.k.data(), g, keys);
    copy_window(vw.data(), ops.v.data(), g, keys);
    const uint16_t *qblk = ops.query_rows(ops.q, r0), *doblk = ops.query_rows(doh, r0);
    blk.scores(p.data(), qblk, kw.data());
    recompute_probabilities(blk, starts, scale, lse, p.data(), p16.data());
    blk.keys_from_rows(dkv.data(), p16.data(), doblk);  // dV += P^T dO
    add_window(dv_sum.data(), dkv.data(), g, keys);
    blk.scores(dp.data(), doblk, vw.data());  // dP = dO V^T
    score_gradients(blk, starts, scale, D, p.data(), dp.data(), p16.data());
    blk.rows_times_keys(dq_sum.data() + ops.rows.offset(0, r0), p16.data(), kw.data());  // dQ = dS K
    blk.keys_from_rows(dkv.data(), p16.data(), qblk);                                    // dK += dS^T Q
    add_window(dk_sum.data(), dkv.data(), g, keys);
  }
  scatter_add(dq, dq_sum.data(), ops.rows);
  scatter_add(dk, dk_sum.data(), ops.keys);
  scatter_add(dv, dv_sum.data(), ops.keys);
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
