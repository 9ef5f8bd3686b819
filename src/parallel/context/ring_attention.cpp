#include "parallel/context/ring_attention.h"

#include "core/error.h"
#include "kernels/kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace ndt {

namespace {

constexpr int kKeyValueTag = 41;
constexpr int kGradientTag = 42;

kernels::AttentionSpan span(const TokenRun& run) { return {run.begin, run.count, run.position}; }

// Waits for every transfer in flight; between kernels, test() lets MPI progress them.
struct Transfers {
  std::vector<WorkHandle> works;
  void progress() {
    for (WorkHandle& w : works) w->test();
  }
  void wait() {
    for (WorkHandle& w : works) w->wait();
    works.clear();
  }
};

// Rank-local document starts [B, T] of this rank's runs, from the whole sequences'
// [B, whole] (empty without document boundaries).
std::vector<int32_t> local_starts(const int32_t* whole_starts, const std::vector<TokenRun>& runs, int B, int T,
                                  int whole) {
  std::vector<int32_t> local;
  if (!whole_starts) return local;
  local.resize(static_cast<size_t>(B) * T);
  for (int b = 0; b < B; ++b) {
    for (const TokenRun& run : runs) {
      std::copy_n(whole_starts + int64_t{b} * whole + run.position, run.count,
                  local.begin() + int64_t{b} * T + run.begin);
    }
  }
  return local;
}

const int32_t* or_null(const std::vector<int32_t>& v) { return v.empty() ? nullptr : v.data(); }

// Visible (query, key) pairs of a query run against a key run summed over the B
// sequences: causal, and with document starts (local rows [B, T]) inside each query's
// document. 0: the pair of runs is skipped.
int64_t visible_pairs(const TokenRun& queries, const TokenRun& keys, const int32_t* starts, int B, int T) {
  if (!starts) return B * causal_pairs(queries, keys);
  int64_t pairs = 0;
  for (int b = 0; b < B; ++b) {
    for (int i = 0; i < queries.count; ++i) {
      const int p = queries.position + i, s = starts[int64_t{b} * T + queries.begin + i];
      const int first = std::max(s, keys.position), last = std::min(p, keys.position + keys.count - 1);
      pairs += std::max(0, last - first + 1);
    }
  }
  return pairs;
}

}  // namespace

int64_t causal_pairs(const TokenRun& queries, const TokenRun& keys) {
  int64_t pairs = 0;
  for (int i = 0; i < queries.count; ++i) {
    pairs += std::clamp(queries.position + i - keys.position + 1, 0, keys.count);
  }
  return pairs;
}

RingAttention::RingAttention(Communicator& cp, const CpLayout& layout) : CpGroupAttention(cp, layout) {
  NDT_CHECK(layout.size == cp.size(), "ring attention: the layout's cp = {} but the cp group has {} ranks",
            layout.size, cp.size());
}

void RingAttention::forward(const AttentionForward& a) const {
  const int n = layout_.size, r = cp_.rank(), T = a.T, whole = n * T;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const int64_t N = int64_t{a.B} * T, KD = int64_t{a.NKV} * a.HS, rows = int64_t{a.B} * a.NH * T;
  const size_t block = static_cast<size_t>(2 * N * KD);
  const std::vector<TokenRun> mine = layout_.runs(r, whole);
  // Scratch: two K/V blocks (K then V), one pair's partial output and log-sum-exp.
  float* kv[2] = {a.scratch, a.scratch + block};
  float* out_part = a.scratch + 2 * block;
  float* lse_part = out_part + N * a.NH * a.HS;
  kernels::copy(kv[0], a.k, N * KD);
  kernels::copy(kv[0] + N * KD, a.v, N * KD);
  kernels::zero(a.out, N * a.NH * a.HS);
  std::fill(a.lse, a.lse + rows, -std::numeric_limits<float>::infinity());

  const std::vector<int32_t> starts = local_starts(a.starts, mine, a.B, T, whole);

  Transfers transfers;
  for (int step = 0; step < n; ++step) {
    const int source = (r + n - step) % n;
    const float* k = kv[step % 2];
    const float* v = k + N * KD;
    if (step + 1 < n) {
      transfers.works.push_back(cp_.irecv(kv[(step + 1) % 2], block, DType::f32, prev, kKeyValueTag));
      transfers.works.push_back(cp_.isend(kv[step % 2], block, DType::f32, next, kKeyValueTag));
    }
    for (const TokenRun& q : mine) {
      for (const TokenRun& key : layout_.runs(source, whole)) {
        const int64_t pairs = visible_pairs(q, key, or_null(starts), a.B, T);
        if (pairs == 0) continue;  // wholly above the diagonal, or in other documents
        // The probabilities are not kept: backward recomputes them from the final lse.
        attention_span_forward_in(a.dtype, out_part, lse_part, a.q, k, v, or_null(starts), a.B, T, T, a.NH, a.NKV,
                                  a.HS, span(q), span(key));
        kernels::attention_merge(a.out, a.lse, out_part, lse_part, a.B, T, a.NH, a.HS, span(q));
        score_pairs_ += pairs * a.NH;
        transfers.progress();
      }
    }
    transfers.wait();
  }
}

void RingAttention::backward(const AttentionBackward& a) const {
  const int n = layout_.size, r = cp_.rank(), T = a.T, whole = n * T;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const int64_t N = int64_t{a.B} * T, KD = int64_t{a.NKV} * a.HS;
  const size_t block = static_cast<size_t>(2 * N * KD);
  const std::vector<TokenRun> mine = layout_.runs(r, whole);
  // Scratch: two K/V blocks, two dK/dV sums (dK then dV), the row term.
  float* kv[2] = {a.scratch, a.scratch + block};
  float* sums[2] = {a.scratch + 2 * block, a.scratch + 3 * block};
  float* D = a.scratch + 4 * block;
  kernels::attention_row_dot(D, a.dout, a.out, a.B, T, a.NH, a.HS);
  kernels::copy(kv[0], a.k, N * KD);
  kernels::copy(kv[0] + N * KD, a.v, N * KD);
  kernels::zero(sums[0], static_cast<int64_t>(block));
  const std::vector<int32_t> starts = local_starts(a.starts, mine, a.B, T, whole);

  Transfers key_values, gradients;
  for (int step = 0; step < n; ++step) {
    const int source = (r + n - step) % n;
    const float* k = kv[step % 2];
    const float* v = k + N * KD;
    float* dk = sums[step % 2];
    if (step + 1 < n) {
      key_values.works.push_back(cp_.irecv(kv[(step + 1) % 2], block, DType::f32, prev, kKeyValueTag));
      key_values.works.push_back(cp_.isend(kv[step % 2], block, DType::f32, next, kKeyValueTag));
    }
    gradients.wait();  // the sums of this step's block have arrived (step 0: zeroed above)
    for (const TokenRun& q : mine) {
      for (const TokenRun& key : layout_.runs(source, whole)) {
        if (visible_pairs(q, key, or_null(starts), a.B, T) == 0) continue;
        attention_span_backward_in(a.dtype, a.dq, dk, dk + N * KD, a.dout, a.q, k, v, a.lse, D, or_null(starts), a.B,
                                   T, T, a.NH, a.NKV, a.HS, span(q), span(key));
        key_values.progress();
      }
    }
    // The block's sums go on to the next rank (after the last step: home to its owner).
    gradients.works.push_back(cp_.irecv(sums[(step + 1) % 2], block, DType::f32, prev, kGradientTag));
    gradients.works.push_back(cp_.isend(dk, block, DType::f32, next, kGradientTag));
    key_values.wait();
  }
  gradients.wait();
  const float* home = sums[n % 2];
  kernels::add_inplace(a.dk, home, N * KD);
  kernels::add_inplace(a.dv, home + N * KD, N * KD);
}

}  // namespace ndt
