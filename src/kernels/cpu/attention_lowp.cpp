// Low-precision attention on the CPU, flash-style, one task per (sequence, key/value head).
//
// Threads. A call is ONE parallel region over the B * NKV tasks (dynamic schedule); a
// task runs on its thread alone from start to end: it rounds its k and v rows (and, one
// block of kRowBlock query rows at a time, its q and dout rows) to dtype in its thread's
// scratch, and runs its products as single-threaded gemm_lowp calls (the region sets
// this thread's team size to one, so oneDNN plans and runs them on the calling thread and
// OpenBLAS's fallback does not fork). A task owns its outputs (out and lse rows; dq rows,
// and its key/value head's dk and dv sums), so no two threads add to one value and the
// bits do not depend on the thread count or the schedule.
//
// Layout. A query row block is [rows][G][HS] (the G query heads of the key/value head side
// by side, as q stores them), i.e. M = rows * G rows against the block's key window: one
// product per step for the whole group, so dK and dV sum over the group inside it.
//
// Forward, per row block: S = Q K^T (fp32 sums), then per row in fp32 the scaled scores'
// softmax over the row's visible keys and its lse; P rounded to dtype; O = P V. Backward,
// per row block: S again, P = exp(scale S - lse) (the merged lse normalises over all
// keys, no row maximum is needed), dV += P^T dO, dP = dO V^T, dS = P o (dP - D) scale,
// dQ = dS K (added into the caller's dq), dK += dS^T Q; dK and dV are summed in the task's
// fp32 buffers, in row-block order, and added into the caller's at the end.
//
// Causality: a row block computes only the union of its rows' key windows in its own
// sequence (SpanMask): blocks above the diagonal are skipped; with document starts the
// block begins at the smallest start of its rows, and each row's softmax covers its own
// window only.
#include "kernels/cpu/attention_lowp.h"

#include "kernels/cpu/attention_span_mask.h"
#include "kernels/cpu/gemm_lowp.h"
#include "kernels/cpu/lowp_bits.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace ndt::cpu {
namespace {

constexpr int kRowBlock = 64;

void check_dtype(const char* kernel, DType dtype) {
  NDT_CHECK(dtype == DType::bf16 || dtype == DType::f16, "{}: dtype must be bf16 or f16, got {}", kernel,
            dtype_name(dtype));
}

// The shapes of one call.
struct Shape {
  DType dtype;
  int B, Tq, Tk, NH, NKV, G, HS;
  AttentionSpan qs, ks;
  float scale;
  int tasks() const { return B * NKV; }
  int64_t group_width() const { return int64_t{G} * HS; }  // one query row's heads of a KV head
  int max_block_rows() const { return std::min(qs.count, kRowBlock) * G; }
};

Shape shape(DType dtype, int B, int Tq, int Tk, int NH, int NKV, int HS, AttentionSpan qs, AttentionSpan ks) {
  return {dtype, B, Tq, Tk, NH, NKV, NH / NKV, HS, qs, ks, 1.0f / std::sqrt(static_cast<float>(HS))};
}

// One task: sequence b, key/value head kvh, and where its rows live in the caller's tensors.
struct Task {
  const Shape& s;
  int b, kvh;
  const int32_t* starts;
  // Query row i of the span, its G heads: [G][HS] in a [B, Tq, NH, HS] tensor.
  int64_t query(int i) const { return ((int64_t{b} * s.Tq + s.qs.begin + i) * s.NH + int64_t{kvh} * s.G) * s.HS; }
  // Key row j of the span in a [B, Tk, NKV, HS] tensor.
  int64_t key(int j) const { return ((int64_t{b} * s.Tk + s.ks.begin + j) * s.NKV + kvh) * s.HS; }
  // Row m of a row block starting at r0 ([rows][G]) in lse / D [B, NH, Tq].
  int64_t stat(int r0, int m) const {
    return (int64_t{b} * s.NH + int64_t{kvh} * s.G + m % s.G) * s.Tq + s.qs.begin + r0 + m / s.G;
  }
  SpanMask mask() const { return span_mask(starts, b, s.Tq, s.qs, s.ks); }
};

// A task's key/value rows x [B, Tk, NKV, HS] in dtype: dst [ks.count][HS].
void round_keys(const Task& t, const float* x, uint16_t* dst) {
  for (int j = 0; j < t.s.ks.count; ++j) {
    lowp_bits::encode_row(t.s.dtype, x + t.key(j), dst + int64_t{j} * t.s.HS, t.s.HS);
  }
}

// Query rows [r0, r1) of x [B, Tq, NH, HS] (the task's heads) in dtype: dst [r1 - r0][G][HS].
void round_queries(const Task& t, const float* x, int r0, int r1, uint16_t* dst) {
  const int64_t w = t.s.group_width();
  for (int i = r0; i < r1; ++i) lowp_bits::encode_row(t.s.dtype, x + t.query(i), dst + (i - r0) * w, w);
}

// One thread's working memory, sized once per call for the largest block.
struct Scratch {
  std::vector<uint16_t> k, v, q, dout, p;  // dtype: keys, values, the block's queries / dout, P or dS
  std::vector<float> s, dp, rows;          // fp32: scores / probabilities, dP, O or dQ
  std::vector<float> dk, dv;               // fp32: the task's key/value gradient sums (backward)
  Scratch(const Shape& sh, bool backward) {
    const size_t keys = static_cast<size_t>(sh.ks.count) * sh.HS, m = static_cast<size_t>(sh.max_block_rows());
    k.resize(keys);
    v.resize(keys);
    q.resize(m * sh.HS);
    p.resize(m * sh.ks.count);
    s.resize(p.size());
    rows.resize(q.size());
    if (!backward) return;
    dout.resize(q.size());
    dp.resize(p.size());
    dk.resize(keys);
    dv.resize(keys);
  }
};

// A row block [r0, r1) of a task against its key window: M = (r1 - r0) * G rows, n keys.
struct Block {
  const Task& t;
  int r0, r1;
  KeyWindow keys;
  int M() const { return (r1 - r0) * t.s.G; }
  int n() const { return keys.hi - keys.lo; }
  const uint16_t* window(const std::vector<uint16_t>& x) const { return x.data() + int64_t{keys.lo} * t.s.HS; }
  float* window(std::vector<float>& x) const { return x.data() + int64_t{keys.lo} * t.s.HS; }
  // Row m's window in the block's columns.
  KeyWindow columns(const SpanMask& mask, int m) const { return mask.columns(r0 + m / t.s.G, keys); }

  // out[M, n] = rows[M, HS] keys[n, HS]^T  (S = Q K^T, dP = dO V^T)
  void scores(float* out, const uint16_t* rows, const uint16_t* keys_at) const {
    gemm_lowp(t.s.dtype, false, true, M(), n(), t.s.HS, rows, t.s.HS, keys_at, t.s.HS, 0.0f, out, n());
  }
  // out[M, HS] = p[M, n] keys[n, HS]  (O = P V, dQ = dS K)
  void rows_times_keys(float* out, const uint16_t* p, const uint16_t* keys_at) const {
    gemm_lowp(t.s.dtype, false, false, M(), t.s.HS, n(), p, n(), keys_at, t.s.HS, 0.0f, out, t.s.HS);
  }
  // sum[n, HS] += p[M, n]^T rows[M, HS]  (dV += P^T dO, dK += dS^T Q)
  void add_keys_from_rows(float* sum, const uint16_t* p, const uint16_t* rows) const {
    gemm_lowp(t.s.dtype, true, false, n(), t.s.HS, M(), p, n(), rows, t.s.HS, 1.0f, sum, t.s.HS);
  }
};

// Zeroes row[0, n) outside the window c and writes its dtype bits to p.
void finish_row(DType dtype, float* row, int n, const KeyWindow& c, uint16_t* p) {
  std::fill(row, row + c.lo, 0.0f);
  std::fill(row + std::max(c.lo, c.hi), row + n, 0.0f);
  lowp_bits::encode_row(dtype, row, p, n);
}

// The forward's per-row step: softmax of the scaled scores over the row's window (fp32),
// lse, and P rounded to dtype (0 outside the window).
void softmax_rows(const Block& blk, float* s, uint16_t* p, float* lse) {
  const SpanMask mask = blk.t.mask();
  const int n = blk.n();
  for (int m = 0; m < blk.M(); ++m) {
    const KeyWindow c = blk.columns(mask, m);
    float* row = s + int64_t{m} * n;
#pragma omp simd
    for (int j = c.lo; j < c.hi; ++j) row[j] *= blk.t.s.scale;
    lse[blk.t.stat(blk.r0, m)] = c.empty() ? kNegInf : softmax_row(row + c.lo, c.hi - c.lo);
    finish_row(blk.t.s.dtype, row, n, c, p + int64_t{m} * n);
  }
}

// The backward's first per-row step: P = exp(scale S - lse) on the row's window (0
// elsewhere, and for a row whose lse is -inf), kept in fp32 in s and rounded into p.
void recompute_probabilities(const Block& blk, const float* lse, float* s, uint16_t* p) {
  const SpanMask mask = blk.t.mask();
  const int n = blk.n();
  for (int m = 0; m < blk.M(); ++m) {
    const float l = lse[blk.t.stat(blk.r0, m)];
    const KeyWindow c = l == kNegInf ? KeyWindow{} : blk.columns(mask, m);
    float* row = s + int64_t{m} * n;
#pragma omp simd
    for (int j = c.lo; j < c.hi; ++j) row[j] = exp_vec(row[j] * blk.t.s.scale - l);
    finish_row(blk.t.s.dtype, row, n, c, p + int64_t{m} * n);
  }
}

// The backward's second per-row step: dS = P o (dP - D) scale on the row's window, rounded
// into ds (0 elsewhere).
void score_gradients(const Block& blk, const float* D, const float* p, float* dp, uint16_t* ds) {
  const SpanMask mask = blk.t.mask();
  const int n = blk.n();
  for (int m = 0; m < blk.M(); ++m) {
    const KeyWindow c = blk.columns(mask, m);
    const float dot = D[blk.t.stat(blk.r0, m)];
    const float* prow = p + int64_t{m} * n;
    float* row = dp + int64_t{m} * n;
#pragma omp simd
    for (int j = c.lo; j < c.hi; ++j) row[j] = prow[j] * (row[j] - dot) * blk.t.s.scale;
    finish_row(blk.t.s.dtype, row, n, c, ds + int64_t{m} * n);
  }
}

// Query rows [r0, r1) of the task's heads: x rows = src [r1 - r0][G][HS] (src null: 0), or
// x rows += src when add.
void store_queries(const Task& t, float* x, int r0, int r1, const float* src, bool add) {
  const int64_t w = t.s.group_width();
  for (int i = r0; i < r1; ++i) {
    float* row = x + t.query(i);
    const float* from = src ? src + (i - r0) * w : nullptr;
    if (from == nullptr) {
      std::fill_n(row, w, 0.0f);
    } else if (!add) {
      std::copy_n(from, w, row);
    } else {
#pragma omp simd
      for (int64_t e = 0; e < w; ++e) row[e] += from[e];
    }
  }
}

void forward_task(const Task& t, Scratch& sc, float* out, float* lse, const float* q, const float* k,
                  const float* v) {
  round_keys(t, k, sc.k.data());
  round_keys(t, v, sc.v.data());
  const SpanMask mask = t.mask();
  for (int r0 = 0; r0 < t.s.qs.count; r0 += kRowBlock) {
    const int r1 = std::min(t.s.qs.count, r0 + kRowBlock);
    const Block blk{t, r0, r1, mask.block(r0, r1)};
    if (blk.keys.empty()) {  // no row of the block sees a key: out 0, lse -inf
      store_queries(t, out, r0, r1, nullptr, false);
      for (int m = 0; m < blk.M(); ++m) lse[t.stat(r0, m)] = kNegInf;
      continue;
    }
    round_queries(t, q, r0, r1, sc.q.data());
    blk.scores(sc.s.data(), sc.q.data(), blk.window(sc.k));
    softmax_rows(blk, sc.s.data(), sc.p.data(), lse);
    blk.rows_times_keys(sc.rows.data(), sc.p.data(), blk.window(sc.v));
    store_queries(t, out, r0, r1, sc.rows.data(), false);
  }
}

void backward_task(const Task& t, Scratch& sc, float* dq, float* dk, float* dv, const float* dout, const float* q,
                   const float* k, const float* v, const float* lse, const float* D) {
  round_keys(t, k, sc.k.data());
  round_keys(t, v, sc.v.data());
  std::fill(sc.dk.begin(), sc.dk.end(), 0.0f);
  std::fill(sc.dv.begin(), sc.dv.end(), 0.0f);
  const SpanMask mask = t.mask();
  for (int r0 = 0; r0 < t.s.qs.count; r0 += kRowBlock) {
    const int r1 = std::min(t.s.qs.count, r0 + kRowBlock);
    const Block blk{t, r0, r1, mask.block(r0, r1)};
    if (blk.keys.empty()) continue;  // no row of the block sees a key: no gradient
    round_queries(t, q, r0, r1, sc.q.data());
    round_queries(t, dout, r0, r1, sc.dout.data());
    blk.scores(sc.s.data(), sc.q.data(), blk.window(sc.k));
    recompute_probabilities(blk, lse, sc.s.data(), sc.p.data());
    blk.add_keys_from_rows(blk.window(sc.dv), sc.p.data(), sc.dout.data());  // dV += P^T dO
    blk.scores(sc.dp.data(), sc.dout.data(), blk.window(sc.v));              // dP = dO V^T
    score_gradients(blk, D, sc.s.data(), sc.dp.data(), sc.p.data());         // p: dS from here
    blk.rows_times_keys(sc.rows.data(), sc.p.data(), blk.window(sc.k));      // dQ = dS K
    store_queries(t, dq, r0, r1, sc.rows.data(), true);
    blk.add_keys_from_rows(blk.window(sc.dk), sc.p.data(), sc.q.data());  // dK += dS^T Q
  }
  for (int j = 0; j < t.s.ks.count; ++j) {
    const int64_t at = t.key(j), from = int64_t{j} * t.s.HS;
#pragma omp simd
    for (int e = 0; e < t.s.HS; ++e) {
      dk[at + e] += sc.dk[from + e];
      dv[at + e] += sc.dv[from + e];
    }
  }
}

// Runs task_fn(task, scratch) for every (sequence, key/value head) in one parallel region,
// each task on one thread with one-thread GEMMs.
template <class F>
void for_each_task(const Shape& s, const int32_t* starts, bool backward, F task_fn) {
#pragma omp parallel if (s.tasks() > 1)
  {
    omp_set_num_threads(1);  // this thread's nested calls (oneDNN, OpenBLAS) run on it alone
    Scratch scratch(s, backward);
#pragma omp for schedule(dynamic, 1)
    for (int n = 0; n < s.tasks(); ++n) task_fn(Task{s, n / s.NKV, n % s.NKV, starts}, scratch);
  }
}

}  // namespace

void attention_span_forward_lowp(DType dtype, float* out, float* lse, const float* q, const float* k, const float* v,
                                 const int32_t* starts, int B, int Tq, int Tk, int NH, int NKV, int HS,
                                 AttentionSpan qs, AttentionSpan ks) {
  const char* kernel = "attention_span_forward_lowp";
  check_dtype(kernel, dtype);
  check_pair(kernel, starts, B, Tq, Tk, NH, NKV, HS, qs, ks);
  if (B == 0 || qs.count == 0) return;
  const Shape s = shape(dtype, B, Tq, Tk, NH, NKV, HS, qs, ks);
  for_each_task(s, starts, false,
                [&](const Task& t, Scratch& sc) { forward_task(t, sc, out, lse, q, k, v); });
}

void attention_span_backward_recompute_lowp(DType dtype, float* dq, float* dk, float* dv, const float* dout,
                                            const float* q, const float* k, const float* v, const float* lse,
                                            const float* D, const int32_t* starts, int B, int Tq, int Tk, int NH,
                                            int NKV, int HS, AttentionSpan qs, AttentionSpan ks) {
  const char* kernel = "attention_span_backward_recompute_lowp";
  check_dtype(kernel, dtype);
  check_pair(kernel, starts, B, Tq, Tk, NH, NKV, HS, qs, ks);
  if (B == 0 || qs.count == 0 || ks.count == 0) return;
  const Shape s = shape(dtype, B, Tq, Tk, NH, NKV, HS, qs, ks);
  for_each_task(s, starts, true, [&](const Task& t, Scratch& sc) {
    backward_task(t, sc, dq, dk, dv, dout, q, k, v, lse, D);
  });
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
