#include "model/context_parallel_attention.h"

#include "kernels/kernels.h"

#include <algorithm>

namespace ndt {

void ContextParallelAttention::forward(const AttentionForward& a) const {
  kernels::attention_forward(a.out, a.lse, a.att, a.q, a.k, a.v, a.starts, a.B, a.T, a.NH, a.NKV, a.HS);
}

void ContextParallelAttention::backward(const AttentionBackward& a) const {
  kernels::attention_backward(a.dq, a.dk, a.dv, a.dout, a.q, a.k, a.v, a.att, a.starts, a.B, a.T, a.NH, a.NKV,
                              a.HS);
}

int64_t attention_probability_floats(const CpLayout& cp, int64_t B, int64_t T, int64_t NH) {
  return cp.active() ? 0 : B * NH * T * T;
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
