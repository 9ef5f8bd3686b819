// Causal scaled-dot-product attention with grouped K/V heads.
// Layouts (contiguous): q[B, T, NH, HS], k and v[B, T, NKV, HS], out[B, T, NH, HS];
// query head h reads K/V head h / (NH / NKV). Scale 1/sqrt(HS).
// Forward also returns lse[B, NH, T], the natural log-sum-exp of each row's scaled
// scores, so partial results over K/V blocks can be merged later (ring attention),
// and keeps the probabilities att[B, NH, T, T] (zero wherever masked) for backward.
//
// The mask. starts == nullptr: causal, row t sees keys 0..t. Otherwise starts[B, T]
// gives, for each row t of each sequence, the position where its document begins
// (0 <= starts[b, t] <= t; data.document_boundaries, docs/data.md), and row t sees keys
// starts[b, t]..t only: the causal mask restarted at every document. Keys before the
// smallest start of a block of rows are not computed at all.
// Contract: forward overwrites out, lse, att; backward adds (+=) into dq, dk, dv.
// Throws ndt::Error for heads that do not group or a start outside [0, t].
#pragma once

#include <cstdint>

namespace ndt::cpu {

void attention_forward(float* out, float* lse, float* att, const float* q, const float* k,
                       const float* v, const int32_t* starts, int B, int T, int NH, int NKV,
                       int HS);

// starts: the forward's.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* att, const int32_t* starts,
                        int B, int T, int NH, int NKV, int HS);

}  // namespace ndt::cpu
