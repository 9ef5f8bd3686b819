#include "model/sequence_chunk_attention.h"

#include "kernels/kernels.h"

#include <algorithm>
#include <limits>

namespace ndt {

namespace {

// The rows of chunk j of a sequence cut into chunks of T tokens: all T of its context's
// rows, at positions j x T onwards.
kernels::AttentionSpan chunk_span(int j, int T) { return {0, T, j * T}; }

const BlockActivations& chunk_block(const SequenceChunk& chunk, int j, int layer) {
  return chunk.earlier[static_cast<size_t>(j)]->blocks[static_cast<size_t>(layer)];
}

}  // namespace

void sequence_chunk_attention_forward(const AttentionForward& a, const SequenceChunk& chunk, int layer) {
  const int s = chunk.index, T = a.T;
  const int64_t N = int64_t{a.B} * T, rows = int64_t{a.B} * a.NH * T;
  float* out_part = a.scratch;
  float* lse_part = out_part + N * a.NH * a.HS;
  kernels::zero(a.out, N * a.NH * a.HS);
  std::fill(a.lse, a.lse + rows, -std::numeric_limits<float>::infinity());
  for (int j = 0; j <= s; ++j) {
    const float* k = j == s ? a.k : chunk_block(chunk, j, layer).k;
    const float* v = j == s ? a.v : chunk_block(chunk, j, layer).v;
    attention_span_forward_in(a.dtype, out_part, lse_part, a.q, k, v, nullptr, a.B, T, T, a.NH, a.NKV, a.HS,
                              chunk_span(s, T), chunk_span(j, T));
    kernels::attention_merge(a.out, a.lse, out_part, lse_part, a.B, T, a.NH, a.HS, chunk_span(s, T));
  }
}

void sequence_chunk_attention_backward(const AttentionBackward& a, const SequenceChunk& chunk, int layer) {
  const int s = chunk.index, T = a.T;
  const int64_t kv = int64_t{a.B} * T * a.NKV * a.HS;  // one chunk's dK (or dV)
  float* sums = chunk.key_value_sums[static_cast<size_t>(layer)];
  if (s == chunk.count - 1) kernels::zero(sums, (chunk.count - 1) * 2 * kv);  // a micro-batch's first backward
  float* D = a.scratch;
  kernels::attention_row_dot(D, a.dout, a.out, a.B, T, a.NH, a.HS);
  for (int j = 0; j <= s; ++j) {
    const float* k = j == s ? a.k : chunk_block(chunk, j, layer).k;
    const float* v = j == s ? a.v : chunk_block(chunk, j, layer).v;
    float* dk = j == s ? a.dk : sums + j * 2 * kv;
    float* dv = j == s ? a.dv : sums + j * 2 * kv + kv;
    attention_span_backward_in(a.dtype, a.dq, dk, dv, a.dout, a.q, k, v, a.lse, D, nullptr, a.B, T, T, a.NH, a.NKV,
                               a.HS, chunk_span(s, T), chunk_span(j, T));
  }
  if (s == chunk.count - 1) return;  // no later chunk left it anything
  kernels::add_inplace(a.dk, sums + s * 2 * kv, kv);
  kernels::add_inplace(a.dv, sums + s * 2 * kv + kv, kv);
}

int64_t sequence_chunk_scratch_floats(int64_t B, int64_t T, int64_t NH, int64_t HS) {
  return B * T * NH * HS + B * NH * T;
}

}  // namespace ndt
