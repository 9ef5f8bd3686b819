// Span kernels of ring attention (context parallelism). A sequence is split over ranks,
// each holding some spans of its rows; a rank attends its queries to one key/value
// block at a time (its own, then the blocks passed round the ring) and merges the
// partial results by log-sum-exp (online softmax). Per (query span, key span) pair:
// attention_span_forward gives the output, lse and (optionally) probabilities over that
// pair's keys alone; attention_merge folds them into the running result. The backward
// then goes one of two ways:
//   - kept probabilities: once every block is in, attention_span_rescale renormalises
//     each pair's probabilities over all keys, and attention_span_backward needs only
//     the pair's own block of them (T x T / cp floats per head per rank);
//   - recomputed (flash-attention style, forward with att null): nothing but out and
//     lse is kept, and attention_span_backward_recompute rebuilds each pair's final
//     probabilities from q, k and the merged lse.
// Either way attention_row_dot gives the backward's row term from the merged output.
// Same layouts, head grouping (query head h reads K/V head h / (NH / NKV)) and scale
// (1/sqrt(HS)) as attention.h; a span's rows hold consecutive sequence positions.
// Contract: forward, merge and rescale overwrite the span's rows only (nothing else is
// written); the backwards add (+=) into dq (rows of the query span), dk and dv (rows of
// the key span).
#pragma once

namespace ndt::cpu {

// A run of consecutive rows of every sequence of a [B, T, H, HS] tensor: rows
// [begin, begin + count) of each sequence b, holding sequence positions
// [position, position + count).
struct AttentionSpan {
  int begin = 0, count = 0, position = 0;
};

// Causal attention of the queries in span qs against the keys/values in span ks; the
// query at position p sees the keys at positions <= p. q, out: [B, Tq, NH, HS]; k, v:
// [B, Tk, NKV, HS]. Writes, for the rows of qs only (everything else untouched):
//   out [B, Tq, NH, HS]: the attention output over these keys alone (0 for a row that
//     sees no key);
//   lse [B, NH, Tq]: the natural log-sum-exp of the row's scaled scores over these keys
//     (-inf for a row that sees none);
//   att [B, NH, Tq, ld_att]: the probabilities normalised over these keys, rows
//     qs.begin .. qs.begin + qs.count - 1, columns col .. col + ks.count - 1 (masked
//     entries 0; columns outside that range untouched).
// att may be null: then no probabilities are kept (ld_att and col are ignored; each row
// block's scores and probabilities go to the kernel's own scratch, [64 rows, ks.count]
// per thread), and out and lse are bitwise the same as with att given.
void attention_span_forward(float* out, float* lse, float* att, int ld_att, int col, const float* q,
                            const float* k, const float* v, int B, int Tq, int Tk, int NH, int NKV,
                            int HS, AttentionSpan qs, AttentionSpan ks);

// Folds a partial result over some keys (out_part, lse_part) into the running result
// over other keys (out, lse), rows of span `rows` only: lse <- log(exp(lse) +
// exp(lse_part)), out <- out * exp(lse_old - lse_new) + out_part * exp(lse_part - lse_new).
// A side with lse -inf contributes nothing (a -inf part leaves the row bitwise as it
// was); both -inf: lse stays -inf and out 0 (no NaN ever).
// out, out_part: [B, T, NH, HS]; lse, lse_part: [B, NH, T].
void attention_merge(float* out, float* lse, const float* out_part, const float* lse_part, int B,
                     int T, int NH, int HS, AttentionSpan rows);

// After all merges: probabilities of one span pair normalised over that pair's keys
// become normalised over all keys: att[rows of qs, columns col .. col + count) *=
// exp(lse_part - lse) per row (lse_part -inf: the row becomes 0).
// att: [B, NH, Tq, ld_att]; lse_part (the pair's forward lse), lse (merged): [B, NH, Tq].
void attention_span_rescale(float* att, int ld_att, int col, int count, const float* lse_part,
                            const float* lse, int B, int Tq, int NH, AttentionSpan qs);

// D[b, h, t] = sum over d of dout[b, t, h, d] * out[b, t, h, d], for all T rows: the
// backward's row term (it equals the row sum of dP o P over all keys, so backward
// needs no full row). dout, out: [B, T, NH, HS]; D: [B, NH, T].
void attention_row_dot(float* D, const float* dout, const float* out, int B, int T, int NH, int HS);

// Backward of one span pair, given att holding the FINAL probabilities (normalised over
// all keys, as after attention_span_rescale; masked entries 0) at rows of qs, columns
// col .. col + ks.count, and D from attention_row_dot: adds (+=) into dq (rows of qs),
// dk and dv (rows of ks):
//   dV += P^T dO;  dP = dO V^T;  dS = P o (dP - D) * scale;  dQ += dS K;  dK += dS^T Q.
// att must not be null (without kept probabilities: attention_span_backward_recompute).
void attention_span_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                             const float* k, const float* v, const float* att, int ld_att, int col,
                             const float* D, int B, int Tq, int Tk, int NH, int NKV, int HS,
                             AttentionSpan qs, AttentionSpan ks);

// Backward of one span pair without kept probabilities: recomputes them from q, k and the
// final (merged over all key blocks) log-sum-exp, P = exp(scale * q.k - lse) on the visible
// keys (0 where masked), then adds (+=) as attention_span_backward does:
//   dV += P^T dO;  dP = dO V^T;  dS = P o (dP - D) * scale;  dQ += dS K;  dK += dS^T Q.
// lse, D: [B, NH, Tq] (D from attention_row_dot). Rows whose lse is -inf contribute nothing.
// Scratch of its own: two [64 rows, ks.count] blocks per thread.
void attention_span_backward_recompute(float* dq, float* dk, float* dv, const float* dout,
                                       const float* q, const float* k, const float* v,
                                       const float* lse, const float* D, int B, int Tq, int Tk,
                                       int NH, int NKV, int HS, AttentionSpan qs, AttentionSpan ks);

}  // namespace ndt::cpu
