#include "parallel/context/ulysses_attention.h"

#include "core/error.h"
#include "kernels/kernels.h"

#include <utility>
#include <vector>

namespace ndt {

UlyssesAttention::UlyssesAttention(Communicator& cp, const CpLayout& layout) : CpGroupAttention(cp, layout) {
  NDT_CHECK(layout.size == cp.size(), "Ulysses attention: the layout's cp = {} but the cp group has {} ranks",
            layout.size, cp.size());
}

HeadAllToAll UlyssesAttention::exchange(int whole) const {
  std::vector<std::vector<int32_t>> rows;
  for (int j = 0; j < layout_.size; ++j) rows.push_back(layout_.positions(j, whole));
  return HeadAllToAll(cp_, std::move(rows));
}

void UlyssesAttention::forward(const AttentionForward& a) const {
  const int n = layout_.size, whole = n * a.T;
  validate_head_split(a.NH, a.NKV, CpMode::ulysses, n);
  const int64_t N = int64_t{a.B} * a.T, QD = int64_t{a.NH} * a.HS, KD = int64_t{a.NKV} * a.HS;
  // Scratch (context_parallel_scratch_floats): q, k, v and the output head-split, then
  // the all-to-all's send and receive buffers.
  float* q = a.scratch;
  float* k = q + N * QD;
  float* v = k + N * KD;
  float* out = v + N * KD;
  float* send = out + N * QD;
  float* recv = send + N * QD;
  const HeadAllToAll heads = exchange(whole);
  heads.to_heads(a.q, q, a.B, a.T, a.NH, a.HS, send, recv);
  heads.to_heads(a.k, k, a.B, a.T, a.NKV, a.HS, send, recv);
  heads.to_heads(a.v, v, a.B, a.T, a.NKV, a.HS, send, recv);
  // Whole sequences of this rank's heads, as one query-key pair without kept
  // probabilities; lse is kept head-split: [B, NH / cp, cp x T].
  const kernels::AttentionSpan all{0, whole, 0};
  attention_span_forward_in(a.dtype, out, a.lse, q, k, v, a.starts, a.B, whole, whole, a.NH / n, a.NKV / n, a.HS,
                            all, all);
  heads.to_tokens(out, a.out, a.B, a.T, a.NH, a.HS, /*accumulate=*/false, send, recv);
}

void UlyssesAttention::backward(const AttentionBackward& a) const {
  const int n = layout_.size, whole = n * a.T;
  const int64_t N = int64_t{a.B} * a.T, QD = int64_t{a.NH} * a.HS, KD = int64_t{a.NKV} * a.HS;
  float* q = a.scratch;
  float* k = q + N * QD;
  float* v = k + N * KD;
  float* out = v + N * KD;
  float* dout = out + N * QD;
  float* dq = dout + N * QD;
  float* dk = dq + N * QD;
  float* dv = dk + N * KD;
  float* send = dv + N * KD;
  float* recv = send + N * QD;
  float* D = recv + N * QD;
  const HeadAllToAll heads = exchange(whole);
  heads.to_heads(a.q, q, a.B, a.T, a.NH, a.HS, send, recv);
  heads.to_heads(a.k, k, a.B, a.T, a.NKV, a.HS, send, recv);
  heads.to_heads(a.v, v, a.B, a.T, a.NKV, a.HS, send, recv);
  heads.to_heads(a.out, out, a.B, a.T, a.NH, a.HS, send, recv);
  heads.to_heads(a.dout, dout, a.B, a.T, a.NH, a.HS, send, recv);
  kernels::attention_row_dot(D, dout, out, a.B, whole, a.NH / n, a.HS);
  kernels::zero(dq, N * QD);
  kernels::zero(dk, N * KD);
  kernels::zero(dv, N * KD);
  const kernels::AttentionSpan all{0, whole, 0};
  attention_span_backward_in(a.dtype, dq, dk, dv, dout, q, k, v, a.lse, D, a.starts, a.B, whole, whole, a.NH / n,
                             a.NKV / n, a.HS, all, all);
  heads.to_tokens(dq, a.dq, a.B, a.T, a.NH, a.HS, /*accumulate=*/true, send, recv);
  heads.to_tokens(dk, a.dk, a.B, a.T, a.NKV, a.HS, /*accumulate=*/true, send, recv);
  heads.to_tokens(dv, a.dv, a.B, a.T, a.NKV, a.HS, /*accumulate=*/true, send, recv);
}

}  // namespace ndt
