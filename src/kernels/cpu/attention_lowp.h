// Attention with its four matrix products in a 16-bit compute dtype (bf16 or f16, the
// mixed-precision training's) on the low-precision GEMM (gemm_lowp.h: oneDNN's AMX /
// AVX512-BF16 kernels where native, else the fallback), and the softmax, its statistics
// and log-sum-exp in fp32. Flash-style: no probabilities are kept; forward writes the
// output and the log-sum-exp, and backward recomputes each block's probabilities from
// q, k and that lse (as FlashAttention-2 does), so attention keeps O(T) floats per row
// rather than O(T^2).
// Same layouts, head grouping, scale, masks (causal, or restarted at document starts)
// and span semantics as attention_span.h, whose fp32 kernels these are the low-precision
// forms of; attention_forward_lowp / attention_backward_lowp are the whole-sequence
// pair (both spans the whole sequence), the low-precision form of attention.h's kernels.
// Rounding: q, k, v and dout are read as dtype (exact when they hold dtype's values, as
// the model's rounded activations do); the probabilities P and the score gradients dS
// are rounded to dtype for the products that take them; every sum is fp32.
// Contract: forward overwrites out and lse (rows of the query span); backward adds (+=)
// into dq, dk, dv. Deterministic on any thread count: the same inputs give the same bits
// (each (sequence, key/value head) is one task on one thread, its row blocks in a fixed
// order; every output is summed by one task in one order).
#pragma once

#include "core/dtype.h"
#include "kernels/cpu/attention_span.h"

#include <cstdint>

namespace ndt::cpu {

// attention_span_forward in dtype.
void attention_span_forward_lowp(DType dtype, float* out, float* lse, const float* q, const float* k, const float* v,
                                 const int32_t* starts, int B, int Tq, int Tk, int NH, int NKV, int HS,
                                 AttentionSpan qs, AttentionSpan ks);

// attention_span_backward_recompute in dtype (lse: the merged forward's; D from
// attention_row_dot).
void attention_span_backward_recompute_lowp(DType dtype, float* dq, float* dk, float* dv, const float* dout,
                                            const float* q, const float* k, const float* v, const float* lse,
                                            const float* D, const int32_t* starts, int B, int Tq, int Tk, int NH,
                                            int NKV, int HS, AttentionSpan qs, AttentionSpan ks);

// The whole-sequence kernel: out [B, T, NH, HS] and lse [B, NH, T] over every visible key.
void attention_forward_lowp(DType dtype, float* out, float* lse, const float* q, const float* k, const float* v,
                            const int32_t* starts, int B, int T, int NH, int NKV, int HS);

// Its backward from the forward's out and lse (no probabilities): adds into dq, dk, dv.
void attention_backward_lowp(DType dtype, float* dq, float* dk, float* dv, const float* dout, const float* q,
                             const float* k, const float* v, const float* out, const float* lse,
                             const int32_t* starts, int B, int T, int NH, int NKV, int HS);

}  // namespace ndt::cpu
