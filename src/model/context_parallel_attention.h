// The model's side of context parallelism: the interface a block calls for its
// attention core (scores, causal softmax, weighted sum), owned here so that the model
// includes nothing from parallel/ or comm/, as with tensor parallelism
// (model/tensor_parallel_regions.h). The base class is context parallelism of size 1:
// the local causal kernel on whole sequences. parallelize() installs ring attention
// (parallel/context/ring_attention.h), Ulysses (parallel/context/ulysses_attention.h) or USP
// (parallel/context/usp_attention.h), whose communication runs over the cp mesh axis
// (USP's over its two parts, cp_ulysses and cp_ring).
//
// Under cp = n a context holds T / n tokens of each of its B sequences (the runs of
// ActivationLayout's CpLayout), with their true positions in ctx.positions; everything
// but attention is token-local and runs on them unchanged.
#pragma once

#include "core/dtype.h"
#include "kernels/kernels.h"
#include "model/activation_layout.h"

#include <cstdint>

namespace ndt {

// One micro-batch's attention core on this rank's local rows (T = local tokens per
// sequence) and heads (NH, NKV: this rank's, after tensor parallelism).
//   q [B, T, NH, HS], k and v [B, T, NKV, HS], out [B, T, NH, HS];
//   att: attention_probability_floats floats of kept probabilities (none under context
//   parallelism or in low precision: backward recomputes them), lse: B x NH x T floats
//   (their layout is the implementation's: backward reads what forward wrote);
//   scratch: context_parallel_scratch_floats floats of the workspace;
//   starts: null (the causal mask), or with document boundaries [B, T x cp], for every
//   position of each whole sequence the position where its document begins
//   (MicroBatchContext::document_starts): a query sees only the keys of its own document;
//   dtype: the compute dtype. f32 runs the fp32 kernels (attention.h, attention_span.h);
//   bf16 / f16 their low-precision forms (attention_lowp.h: products in dtype on gemm_lowp,
//   softmax in fp32, flash-style).
struct AttentionForward {
  float* out;
  float* lse;
  float* att;
  const float* q;
  const float* k;
  const float* v;
  int B, T, NH, NKV, HS;
  float* scratch;
  const int32_t* starts = nullptr;
  DType dtype = DType::f32;
};

// Backward adds (+=) into dq, dk, dv; out and lse are forward's (the recomputed
// probabilities' normaliser and the row term); starts as forward's.
struct AttentionBackward {
  float* dq;
  float* dk;
  float* dv;
  const float* dout;
  const float* q;
  const float* k;
  const float* v;
  const float* att;
  const float* out;
  const float* lse;
  int B, T, NH, NKV, HS;
  float* scratch;
  const int32_t* starts = nullptr;
  DType dtype = DType::f32;
};

class ContextParallelAttention {
 public:
  virtual ~ContextParallelAttention() = default;
  virtual CpLayout layout() const { return {}; }
  virtual int rank() const { return 0; }
  virtual void forward(const AttentionForward& a) const;
  virtual void backward(const AttentionBackward& a) const;
  // x[0..n) summed over the cp ranks, in place (per-sequence statistics of a split
  // sequence: the MoE router's, model/moe.h). The identity for cp = 1.
  virtual void sum_over_ranks(float* x, int64_t n) const {}
};

// The span kernels of ring attention (kernels/cpu/attention_span.h) in the compute dtype:
// the fp32 kernels for f32, their low-precision forms (attention_lowp.h) for bf16 / f16.
// Arguments as kernels::attention_span_forward / attention_span_backward_recompute.
void attention_span_forward_in(DType dtype, float* out, float* lse, const float* q, const float* k, const float* v,
                               const int32_t* starts, int B, int Tq, int Tk, int NH, int NKV, int HS,
                               kernels::AttentionSpan qs, kernels::AttentionSpan ks);
void attention_span_backward_in(DType dtype, float* dq, float* dk, float* dv, const float* dout, const float* q,
                                const float* k, const float* v, const float* lse, const float* D,
                                const int32_t* starts, int B, int Tq, int Tk, int NH, int NKV, int HS,
                                kernels::AttentionSpan qs, kernels::AttentionSpan ks);

// The floats of attention probabilities a block keeps for B x T local rows of NH heads:
// B x NH x T x T for the local fp32 kernel; none under context parallelism, whose backward
// recomputes them from q, k and the log-sum-exp (flash-attention style), so that every
// activation of a rank scales with its T = seq_len / cp tokens; none in a low-precision
// compute dtype either, whose kernels are flash-style on every layout.
int64_t attention_probability_floats(const CpLayout& cp, DType compute, int64_t B, int64_t T, int64_t NH);
// The workspace scratch an implementation of `cp` uses for B x T local rows (0 for cp = 1):
//   ring: forward, two K/V receive buffers, one partial output and its log-sum-exp;
//     backward, two K/V and two dK/dV buffers and the row term;
//   Ulysses: the head-split q, k, v, output, output gradient and dq, dk, dv, a send and a
//     receive buffer, and the row term;
//   USP: Ulysses' head-split tensors and buffers, then the ring's scratch for its
//     cp_ulysses x T rows of NH / cp_ulysses heads (as many floats as the ring's for T rows).
int64_t context_parallel_scratch_floats(const CpLayout& cp, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                        int64_t HS);

}  // namespace ndt
