// Span kernels of ring attention (context parallelism). A sequence is split over ranks,
// each holding some spans of its rows; a rank attends its queries to one key/value
// block at a time (its own, then the blocks passed round the ring) and merges the
// partial results by log-sum-exp (online softmax). Per (query span, key span) pair:
// attention_span_forward gives the output and lse over that pair's keys alone, and
// attention_merge folds them into the running result. No probabilities are kept
// (flash-attention style): once every block is in, attention_row_dot gives the
// backward's row term D from the merged output, and attention_span_backward_recompute
// rebuilds each pair's final probabilities from q, k and the merged lse.
// Same layouts, head grouping (query head h reads K/V head h / (NH / NKV)) and scale
// (1/sqrt(HS)) as attention.h; a span's rows hold consecutive sequence positions.
// Document masks (data.document_boundaries): `starts`, when not null, is [B, Tq]: for
// each query row, the sequence position where its document begins (0 <= start <= the
// row's position). The row then sees the keys at positions start..its own only; a row
// block skips every key before its smallest start. Null: the causal mask alone, as if
// every start were 0.
// Contract: forward and merge overwrite the span's rows only (nothing else is
// written); the backward adds (+=) into dq (rows of the query span), dk and dv (rows of
// the key span).
#pragma once

#include <cstdint>

namespace ndt::cpu {

// A run of consecutive rows of every sequence of a [B, T, H, HS] tensor: rows
// [begin, begin + count) of each sequence b, holding sequence positions
// [position, position + count).
struct AttentionSpan {
  int begin = 0, count = 0, position = 0;
};

// Causal attention of the queries in span qs against the keys/values in span ks; the
// query at position p sees the keys at positions <= p (and, with starts, >= its
// document's start). q, out: [B, Tq, NH, HS]; k, v: [B, Tk, NKV, HS]; starts: null or
// [B, Tq]. Writes, for the rows of qs only (everything else untouched):
//   out [B, Tq, NH, HS]: the attention output over these keys alone (0 for a row that
//     sees no key);
//   lse [B, NH, Tq]: the natural log-sum-exp of the row's scaled scores over these keys
//     (-inf for a row that sees none).
// Each row block's scores and probabilities go to the kernel's own scratch, [64 rows,
// ks.count] per thread.
void attention_span_forward(float* out, float* lse, const float* q, const float* k,
                            const float* v, const int32_t* starts, int B, int Tq, int Tk, int NH,
                            int NKV, int HS, AttentionSpan qs, AttentionSpan ks);

// Folds a partial result over some keys (out_part, lse_part) into the running result
// over other keys (out, lse), rows of span `rows` only: lse <- log(exp(lse) +
// exp(lse_part)), out <- out * exp(lse_old - lse_new) + out_part * exp(lse_part - lse_new).
// A side with lse -inf contributes nothing (a -inf part leaves the row bitwise as it
// was); both -inf: lse stays -inf and out 0 (no NaN ever).
// out, out_part: [B, T, NH, HS]; lse, lse_part: [B, NH, T].
void attention_merge(float* out, float* lse, const float* out_part, const float* lse_part, int B,
                     int T, int NH, int HS, AttentionSpan rows);

// D[b, h, t] = sum over d of dout[b, t, h, d] * out[b, t, h, d], for all T rows: the
// backward's row term (it equals the row sum of dP o P over all keys, so backward
// needs no full row). dout, out: [B, T, NH, HS]; D: [B, NH, T].
void attention_row_dot(float* D, const float* dout, const float* out, int B, int T, int NH, int HS);

// Backward of one span pair: recomputes its probabilities from q, k and the final (merged
// over all key blocks) log-sum-exp, P = exp(scale * q.k - lse) on the visible keys (0 where
// masked), then adds (+=) into dq (rows of qs), dk and dv (rows of ks):
//   dV += P^T dO;  dP = dO V^T;  dS = P o (dP - D) * scale;  dQ += dS K;  dK += dS^T Q.
// lse, D: [B, NH, Tq] (D from attention_row_dot); starts: the forward's. Rows whose lse is
// -inf contribute nothing. Scratch of its own: two [64 rows, ks.count] blocks per thread.
void attention_span_backward_recompute(float* dq, float* dk, float* dv, const float* dout,
                                       const float* q, const float* k, const float* v,
                                       const float* lse, const float* D, const int32_t* starts,
                                       int B, int Tq, int Tk, int NH, int NKV, int HS,
                                       AttentionSpan qs, AttentionSpan ks);

}  // namespace ndt::cpu
