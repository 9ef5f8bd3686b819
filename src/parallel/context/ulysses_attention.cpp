#include "parallel/context/ulysses_attention.h"

#include "core/error.h"
#include "kernels/kernels.h"

#include <vector>

namespace ndt {

void validate_ulysses(int heads, int kv_heads, int cp) {
  NDT_CHECK(heads % cp == 0 && kv_heads % cp == 0,
            "parallel.cp_mode = \"ulysses\" splits the attention heads over parallel.cp = {}: this rank's {} heads and "
            "{} KV heads (after tensor parallelism) must both divide by it; use parallel.cp_mode = \"ring\", which has "
            "no such limit",
            cp, heads, kv_heads);
}

UlyssesAttention::UlyssesAttention(Communicator& cp, const CpLayout& layout) : cp_(cp), layout_(layout) {
  NDT_CHECK(layout.size == cp.size(), "Ulysses attention: the layout's cp = {} but the cp group has {} ranks",
            layout.size, cp.size());
}

// Blocks of the all-to-all are [B, T, H / cp, HS] (rank j's rows, one rank's heads):
// in to_heads block j holds heads j*P.. of this rank's rows, going to rank j; received
// block j holds this rank's heads of rank j's rows, placed at their positions.
UlyssesAttention::Positions UlyssesAttention::positions(int whole) const {
  Positions all;
  for (int j = 0; j < layout_.size; ++j) all.push_back(layout_.positions(j, whole));
  return all;
}

void UlyssesAttention::to_heads(const float* tokens, float* heads, int B, int T, int H, int HS,
                                const Positions& positions, float* send, float* recv) const {
  const int n = layout_.size, P = H / n, whole = n * T;
  const int64_t piece = int64_t{P} * HS, block = int64_t{B} * T * piece;
  for (int j = 0; j < n; ++j) {
    for (int64_t row = 0; row < int64_t{B} * T; ++row) {
      kernels::copy(send + j * block + row * piece, tokens + (row * H + int64_t{j} * P) * HS, piece);
    }
  }
  cp_.all_to_all(send, recv, static_cast<size_t>(block), DType::f32);
  for (int j = 0; j < n; ++j) {
    const std::vector<int32_t>& rows = positions[static_cast<size_t>(j)];
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        kernels::copy(heads + (int64_t{b} * whole + rows[static_cast<size_t>(t)]) * piece,
                      recv + j * block + (int64_t{b} * T + t) * piece, piece);
      }
    }
  }
}

void UlyssesAttention::to_tokens(const float* heads, float* tokens, int B, int T, int H, int HS, bool accumulate,
                                 const Positions& positions, float* send, float* recv) const {
  const int n = layout_.size, P = H / n, whole = n * T;
  const int64_t piece = int64_t{P} * HS, block = int64_t{B} * T * piece;
  for (int j = 0; j < n; ++j) {
    const std::vector<int32_t>& rows = positions[static_cast<size_t>(j)];
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        kernels::copy(send + j * block + (int64_t{b} * T + t) * piece,
                      heads + (int64_t{b} * whole + rows[static_cast<size_t>(t)]) * piece, piece);
      }
    }
  }
  cp_.all_to_all(send, recv, static_cast<size_t>(block), DType::f32);
  for (int j = 0; j < n; ++j) {
    for (int64_t row = 0; row < int64_t{B} * T; ++row) {
      float* dst = tokens + (row * H + int64_t{j} * P) * HS;
      const float* src = recv + j * block + row * piece;
      if (accumulate) {
        kernels::add_inplace(dst, src, piece);
      } else {
        kernels::copy(dst, src, piece);
      }
    }
  }
}

void UlyssesAttention::sum_over_ranks(float* x, int64_t n) const {
  cp_.all_reduce(x, static_cast<size_t>(n), DType::f32, ReduceOp::sum);
}

void UlyssesAttention::forward(const AttentionForward& a) const {
  const int n = layout_.size, whole = n * a.T;
  validate_ulysses(a.NH, a.NKV, n);
  const int64_t N = int64_t{a.B} * a.T, QD = int64_t{a.NH} * a.HS, KD = int64_t{a.NKV} * a.HS;
  // Scratch (context_parallel_scratch_floats): q, k, v and the output head-split, then
  // the all-to-all's send and receive buffers.
  float* q = a.scratch;
  float* k = q + N * QD;
  float* v = k + N * KD;
  float* out = v + N * KD;
  float* send = out + N * QD;
  float* recv = send + N * QD;
  const Positions at = positions(whole);  // every rank's rows' sequence positions
  to_heads(a.q, q, a.B, a.T, a.NH, a.HS, at, send, recv);
  to_heads(a.k, k, a.B, a.T, a.NKV, a.HS, at, send, recv);
  to_heads(a.v, v, a.B, a.T, a.NKV, a.HS, at, send, recv);
  // Whole sequences of this rank's heads, as one query-key pair without kept
  // probabilities; lse is kept head-split: [B, NH / cp, cp x T].
  const kernels::AttentionSpan all{0, whole, 0};
  kernels::attention_span_forward(out, a.lse, q, k, v, a.starts, a.B, whole, whole, a.NH / n, a.NKV / n, a.HS,
                                  all, all);
  to_tokens(out, a.out, a.B, a.T, a.NH, a.HS, /*accumulate=*/false, at, send, recv);
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
  const Positions at = positions(whole);
  to_heads(a.q, q, a.B, a.T, a.NH, a.HS, at, send, recv);
  to_heads(a.k, k, a.B, a.T, a.NKV, a.HS, at, send, recv);
  to_heads(a.v, v, a.B, a.T, a.NKV, a.HS, at, send, recv);
  to_heads(a.out, out, a.B, a.T, a.NH, a.HS, at, send, recv);
  to_heads(a.dout, dout, a.B, a.T, a.NH, a.HS, at, send, recv);
  kernels::attention_row_dot(D, dout, out, a.B, whole, a.NH / n, a.HS);
  kernels::zero(dq, N * QD);
  kernels::zero(dk, N * KD);
  kernels::zero(dv, N * KD);
  const kernels::AttentionSpan all{0, whole, 0};
  kernels::attention_span_backward_recompute(dq, dk, dv, dout, q, k, v, a.lse, D, a.starts, a.B, whole, whole,
                                             a.NH / n, a.NKV / n, a.HS, all, all);
  to_tokens(dq, a.dq, a.B, a.T, a.NH, a.HS, /*accumulate=*/true, at, send, recv);
  to_tokens(dk, a.dk, a.B, a.T, a.NKV, a.HS, /*accumulate=*/true, at, send, recv);
  to_tokens(dv, a.dv, a.B, a.T, a.NKV, a.HS, /*accumulate=*/true, at, send, recv);
}

}  // namespace ndt
