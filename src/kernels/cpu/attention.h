// Causal scaled-dot-product attention with grouped K/V heads.
// Layouts (contiguous): q[B, T, NH, HS], k and v[B, T, NKV, HS], out[B, T, NH, HS];
// query head h reads K/V head h / (NH / NKV). Scale 1/sqrt(HS).
// Forward also returns lse[B, NH, T], the natural log-sum-exp of each row's scaled
// scores, so partial results over K/V blocks can be merged later (ring attention),
// and keeps the probabilities att[B, NH, T, T] (upper triangle zero) for backward.
// Contract: forward overwrites out, lse, att; backward adds (+=) into dq, dk, dv.
#pragma once

namespace ndt::cpu {

void attention_forward(float* out, float* lse, float* att, const float* q, const float* k,
                       const float* v, int B, int T, int NH, int NKV, int HS);

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* att, int B, int T, int NH,
                        int NKV, int HS);

}  // namespace ndt::cpu
