#include "model/context_parallel_attention.h"

#include "kernels/kernels.h"

#include <algorithm>

namespace ndt {

void ContextParallelAttention::forward(const AttentionForward& a) const {
  if (a.dtype != DType::f32) {
    kernels::attention_forward_lowp(a.dtype, a.out, a.lse, a.q, a.k, a.v, a.starts, a.B, a.T, a.NH, a.NKV, a.HS);
    return;
  }
  kernels::attention_forward(a.out, a.lse, a.att, a.q, a.k, a.v, a.starts, a.B, a.T, a.NH, a.NKV, a.HS);
}

void ContextParallelAttention::backward(const AttentionBackward& a) const {
  if (a.dtype != DType::f32) {
    kernels::attention_backward_lowp(a.dtype, a.dq, a.dk, a.dv, a.dout, a.q, a.k, a.v, a.out, a.lse, a.starts, a.B,
                                     a.T, a.NH, a.NKV, a.HS);
    return;
  }
  kernels::attention_backward(a.dq, a.dk, a.dv, a.dout, a.q, a.k, a.v, a.att, a.starts, a.B, a.T, a.NH, a.NKV,
                              a.HS);
}

void attention_span_forward_in(DType dtype, float* out, float* lse, const float* q, const float* k, const float* v,
                               const int32_t* starts, int B, int Tq, int Tk, int NH, int NKV, int HS,
                               kernels::AttentionSpan qs, kernels::AttentionSpan ks) {
  if (dtype == DType::f32) {
    kernels::attention_span_forward(out, lse, q, k, v, starts, B, Tq, Tk, NH, NKV, HS, qs, ks);
  } else {
    kernels::attention_span_forward_lowp(dtype, out, lse, q, k, v, starts, B, Tq, Tk, NH, NKV, HS, qs, ks);
  }
}

void attention_span_backward_in(DType dtype, float* dq, float* dk, float* dv, const float* dout, const float* q,
                                const float* k, const float* v, const float* lse, const float* D,
                                const int32_t* starts, int B, int Tq, int Tk, int NH, int NKV, int HS,
                                kernels::AttentionSpan qs, kernels::AttentionSpan ks) {
  if (dtype == DType::f32) {
    kernels::attention_span_backward_recompute(dq, dk, dv, dout, q, k, v, lse, D, starts, B, Tq, Tk, NH, NKV, HS, qs,
                                               ks);
  } else {
    kernels::attention_span_backward_recompute_lowp(dtype, dq, dk, dv, dout, q, k, v, lse, D, starts, B, Tq, Tk, NH,
                                                    NKV, HS, qs, ks);
  }
}

int64_t attention_probability_floats(const CpLayout& cp, DType compute, int64_t B, int64_t T, int64_t NH) {
  return cp.active() || compute != DType::f32 ? 0 : B * NH * T * T;
}

int64_t context_parallel_scratch_floats(const CpLayout& cp, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                        int64_t HS) {
  if (!cp.active()) return 0;
  const int64_t N = B * T, QD = NH * HS, KD = NKV * HS, rows = B * NH * T;
  if (cp.mode == CpMode::ulysses) return N * (7 * QD + 4 * KD) + rows;
  const int64_t forward = 2 * (2 * N * KD) + N * QD + rows;
  const int64_t backward = 4 * (2 * N * KD) + rows;
  const int64_t ring = std::max(forward, backward);
  // USP's ring runs on cp_ulysses x N rows of NH / cp_ulysses and NKV / cp_ulysses heads:
  // the same floats as above; before it the head-split tensors and the all-to-all's buffers.
  if (cp.mode == CpMode::usp) return N * (6 * QD + 4 * KD) + ring;
  return ring;
}

}  // namespace ndt
