// Ring attention's span kernels on the CPU, built like attention.cpp: sgemm for the
// matrix products on blocks of kRowBlock query rows, a vectorised softmax in between.
//
// Causality across spans. The query at position p sees n(p) = clamp(p - ks.position + 1,
// 0, ks.count) keys of the key span: its first n(p) rows. With a document start s it
// sees rows [clamp(s - ks.position, 0, ks.count), n(p)) (SpanMask: a window per row). A
// row block computes only the union of its rows' windows, from the smallest start to the
// last row's n(p); a block none of whose rows sees a key is skipped (its outputs are
// written as "no key": out 0, lse -inf). A key span wholly before the query span is
// unmasked, one wholly after it is all skipped. Without starts every window begins at 0
// and every call and loop is the plain causal kernel's.
//
// Threading as in attention.cpp: forward one OpenMP task per (b, h); backward one per
// (b, kv_head) with that KV head's query heads looped inside, so each dK/dV row is
// accumulated by one thread in a fixed order (race-free, bitwise the same on any thread
// count); calls below kMinParallelWork multiply-adds run serially. sgemm inside the
// parallel region runs single-threaded (see attention.cpp). Per-thread scratch holds one
// row block at a time: the forward's scores / probabilities, the backward's recomputed
// probabilities and its dP / dS.
//
// The backward (attention_span_backward_recompute) repeats the forward's score product
// (same sgemm, same scale) and takes P = exp(S - lse) with the final lse directly: no
// row maximum or sum is needed, since lse already normalises over all keys.
#include "kernels/cpu/attention_span.h"
#include "kernels/cpu/attention_span_mask.h"
#include "kernels/cpu/vec_math.h"

#include "core/error.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace ndt::cpu {
namespace {

constexpr int kRowBlock = 64;
// As attention.cpp: below this many multiply-adds a parallel region costs more than
// it saves.
constexpr int64_t kMinParallelWork = int64_t{1} << 18;

bool use_parallel(int64_t work) { return work >= kMinParallelWork && omp_get_max_threads() > 1; }

// Row-major C = alpha * op(A) op(B) + beta * C.
inline void sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

void attention_span_forward(float* out, float* lse, const float* q, const float* k,
                            const float* v, const int32_t* starts, int B, int Tq, int Tk, int NH,
                            int NKV, int HS, AttentionSpan qs, AttentionSpan ks) {
  check_pair("attention_span_forward", starts, B, Tq, Tk, NH, NKV, HS, qs, ks);
  const int group = NH / NKV;
  const int ldq = NH * HS, ldk = NKV * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int tasks = B * NH;
  const bool parallel = use_parallel(pair_work(B, NH, HS, qs, ks));
  // One row block's scores/probabilities per thread: [rows, ks.count] with leading
  // dimension ks.count.
  const int lda = ks.count;
  const int64_t bsize = int64_t{std::min(qs.count, kRowBlock)} * ks.count;
  std::vector<float> scratch(static_cast<size_t>((parallel ? omp_get_max_threads() : 1) * bsize));

#pragma omp parallel for schedule(static) if (parallel)
  for (int task = 0; task < tasks; ++task) {
    const int b = task / NH, h = task % NH, kvh = h / group;
    const SpanMask mask = span_mask(starts, b, Tq, qs, ks);
    // Everything from the spans' first rows.
    const float* qbh = q + (static_cast<int64_t>(b) * Tq + qs.begin) * ldq + h * HS;
    const float* kb = k + (static_cast<int64_t>(b) * Tk + ks.begin) * ldk + kvh * HS;
    const float* vb = v + (static_cast<int64_t>(b) * Tk + ks.begin) * ldk + kvh * HS;
    float* obh = out + (static_cast<int64_t>(b) * Tq + qs.begin) * ldq + h * HS;
    float* lbh = lse + static_cast<int64_t>(task) * Tq + qs.begin;
    float* ablk = scratch.data() + (parallel ? omp_get_thread_num() : 0) * bsize;

    for (int r0 = 0; r0 < qs.count; r0 += kRowBlock) {
      const int r1 = std::min(qs.count, r0 + kRowBlock), rows = r1 - r0;
      const KeyWindow keys = mask.block(r0, r1);
      float* oblk = obh + static_cast<int64_t>(r0) * ldq;
      if (keys.empty()) {  // no row of the block sees a key
        for (int i = 0; i < rows; ++i) {
          std::fill_n(oblk + static_cast<int64_t>(i) * ldq, HS, 0.0f);
          lbh[r0 + i] = kNegInf;
        }
        continue;
      }
      const int nblk = keys.hi - keys.lo;
      const int64_t kofs = static_cast<int64_t>(keys.lo) * ldk;
      // S[r0:r1, 0:nblk] = scale * Q[r0:r1] K[keys]^T
      sgemm(false, true, rows, nblk, HS, scale, qbh + static_cast<int64_t>(r0) * ldq, ldq, kb + kofs, ldk,
            0.0f, ablk, lda);
      for (int i = 0; i < rows; ++i) {
        float* row = ablk + static_cast<int64_t>(i) * lda;
        const KeyWindow c = mask.columns(r0 + i, keys);
        lbh[r0 + i] = c.empty() ? kNegInf : softmax_row(row + c.lo, c.hi - c.lo);
        std::fill(row, row + c.lo, 0.0f);
        std::fill(row + std::max(c.lo, c.hi), row + nblk, 0.0f);
      }
      // O[r0:r1] = P[r0:r1, 0:nblk] V[keys]   (a row that sees no key: P 0, O 0)
      sgemm(false, false, rows, HS, nblk, 1.0f, ablk, lda, vb + kofs, ldk, 0.0f, oblk, ldq);
    }
  }
}

void attention_merge(float* out, float* lse, const float* out_part, const float* lse_part, int B,
                     int T, int NH, int HS, AttentionSpan rows) {
  check_rows("attention_merge", B, T, NH, HS);
  check_span("attention_merge", "row", rows, T);
  const int ldo = NH * HS;
  const int tasks = B * NH;
  const bool parallel = use_parallel(int64_t{B} * NH * rows.count * HS);

#pragma omp parallel for schedule(static) if (parallel)
  for (int task = 0; task < tasks; ++task) {
    const int b = task / NH, h = task % NH;
    for (int t = rows.begin; t < rows.begin + rows.count; ++t) {
      const int64_t li = static_cast<int64_t>(task) * T + t;
      const int64_t oi = (static_cast<int64_t>(b) * T + t) * ldo + h * HS;
      float* o = out + oi;
      const float* op = out_part + oi;
      const float l = lse[li], lp = lse_part[li];
      if (lp == kNegInf) {  // the part has no key: nothing to add
        if (l == kNegInf) std::fill_n(o, HS, 0.0f);
        continue;
      }
      if (l == kNegInf) {  // nothing so far: the part is the result
        std::copy_n(op, HS, o);
        lse[li] = lp;
        continue;
      }
      // In double: one exp/log pair per row, and the weights come out to the last bit.
      const double mx = std::max(l, lp), mn = std::min(l, lp);
      const double lnew = mx + std::log1p(std::exp(mn - mx));
      const float w = static_cast<float>(std::exp(l - lnew));
      const float wp = static_cast<float>(std::exp(lp - lnew));
#pragma omp simd
      for (int d = 0; d < HS; ++d) o[d] = o[d] * w + op[d] * wp;
      lse[li] = static_cast<float>(lnew);
    }
  }
}

void attention_row_dot(float* D, const float* dout, const float* out, int B, int T, int NH,
                       int HS) {
  check_rows("attention_row_dot", B, T, NH, HS);
  const int ldo = NH * HS;
  const int tasks = B * NH;
  const bool parallel = use_parallel(int64_t{B} * NH * T * HS);

#pragma omp parallel for schedule(static) if (parallel)
  for (int task = 0; task < tasks; ++task) {
    const int b = task / NH, h = task % NH;
    for (int t = 0; t < T; ++t) {
      const int64_t oi = (static_cast<int64_t>(b) * T + t) * ldo + h * HS;
      const float* g = dout + oi;
      const float* o = out + oi;
      // In double: dS = P o (dP - D) cancels where dP is near D, so D is kept exact.
      double dot = 0.0;
#pragma omp simd reduction(+ : dot)
      for (int d = 0; d < HS; ++d) dot += double(g[d]) * o[d];
      D[static_cast<int64_t>(task) * T + t] = static_cast<float>(dot);
    }
  }
}

void attention_span_backward_recompute(float* dq, float* dk, float* dv, const float* dout,
                                       const float* q, const float* k, const float* v,
                                       const float* lse, const float* D, const int32_t* starts,
                                       int B, int Tq, int Tk, int NH, int NKV, int HS,
                                       AttentionSpan qs, AttentionSpan ks) {
  check_pair("attention_span_backward_recompute", starts, B, Tq, Tk, NH, NKV, HS, qs, ks);
  const int group = NH / NKV;
  const int ldq = NH * HS, ldk = NKV * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int tasks = B * NKV;
  const bool parallel = use_parallel(pair_work(B, NH, HS, qs, ks));
  const int nbuf = parallel ? omp_get_max_threads() : 1;
  const int64_t bsize = static_cast<int64_t>(std::min(qs.count, kRowBlock)) * ks.count;
  // Per thread, [rows, nblk] each: one row block's recomputed probabilities and its dP / dS.
  const int64_t tsize = 2 * bsize;
  std::vector<float> scratch(static_cast<size_t>(nbuf * tsize));

#pragma omp parallel for schedule(static) if (parallel)
  for (int task = 0; task < tasks; ++task) {
    const int b = task / NKV, kvh = task % NKV;
    const SpanMask mask = span_mask(starts, b, Tq, qs, ks);
    float* ds = scratch.data() + (parallel ? omp_get_thread_num() : 0) * tsize;
    float* pbuf = ds + bsize;
    const int64_t koff = (static_cast<int64_t>(b) * Tk + ks.begin) * ldk + kvh * HS;

    for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
      const int64_t off = (static_cast<int64_t>(b) * Tq + qs.begin) * ldq + h * HS;
      const int64_t bh = static_cast<int64_t>(b) * NH + h;
      const float* lbh = lse + bh * Tq + qs.begin;
      const float* dbh = D + bh * Tq + qs.begin;

      for (int r0 = 0; r0 < qs.count; r0 += kRowBlock) {
        const int r1 = std::min(qs.count, r0 + kRowBlock), rows = r1 - r0;
        const KeyWindow keys = mask.block(r0, r1);
        if (keys.empty()) continue;  // no row of the block sees a key: no gradient
        const int nblk = keys.hi - keys.lo;
        // The block's keys and query rows.
        const int64_t kofs = koff + static_cast<int64_t>(keys.lo) * ldk;
        const float *kb = k + kofs, *vb = v + kofs;
        float *dkb = dk + kofs, *dvb = dv + kofs;
        const int64_t qofs = off + static_cast<int64_t>(r0) * ldq;
        const float *qblk = q + qofs, *doblk = dout + qofs;
        // S[r0:r1, 0:nblk] = scale * Q[r0:r1] K[keys]^T as in the forward, then
        // P = exp(S - lse) on the visible keys (0 where masked or lse is -inf).
        sgemm(false, true, rows, nblk, HS, scale, qblk, ldq, kb, ldk, 0.0f, pbuf, nblk);
        for (int i = 0; i < rows; ++i) {
          const float l = lbh[r0 + i];
          const KeyWindow c = l == kNegInf ? KeyWindow{} : mask.columns(r0 + i, keys);
          float* p = pbuf + static_cast<int64_t>(i) * nblk;
#pragma omp simd
          for (int j = c.lo; j < c.hi; ++j) p[j] = exp_vec(p[j] - l);
          std::fill(p, p + c.lo, 0.0f);
          std::fill(p + std::max(c.lo, c.hi), p + nblk, 0.0f);
        }
        // dV[keys] += P[r0:r1, 0:nblk]^T dO[r0:r1]
        sgemm(true, false, nblk, HS, rows, 1.0f, pbuf, nblk, doblk, ldq, 1.0f, dvb, ldk);
        // dP[r0:r1, 0:nblk] = dO[r0:r1] V[keys]^T   (ds has leading dimension nblk)
        sgemm(false, true, rows, nblk, HS, 1.0f, doblk, ldq, vb, ldk, 0.0f, ds, nblk);
        // dS = P o (dP - D) * scale; zero where masked.
        for (int i = 0; i < rows; ++i) {
          const KeyWindow c = mask.columns(r0 + i, keys);
          const float* p = pbuf + static_cast<int64_t>(i) * nblk;
          float* d = ds + static_cast<int64_t>(i) * nblk;
          const float dot = dbh[r0 + i];
#pragma omp simd
          for (int j = c.lo; j < c.hi; ++j) d[j] = p[j] * (d[j] - dot) * scale;
          std::fill(d, d + c.lo, 0.0f);
          std::fill(d + std::max(c.lo, c.hi), d + nblk, 0.0f);
        }
        // dQ[r0:r1] += dS K[keys]
        sgemm(false, false, rows, HS, nblk, 1.0f, ds, nblk, kb, ldk, 1.0f, dq + qofs, ldq);
        // dK[keys] += dS^T Q[r0:r1]
        sgemm(true, false, nblk, HS, rows, 1.0f, ds, nblk, qblk, ldq, 1.0f, dkb, ldk);
      }
    }
  }
}

}  // namespace ndt::cpu
