// Fused softmax cross-entropy: max-subtracted, exp sums accumulated in double, the
// gradient written in place over the logits. One OpenMP iteration per row; each row
// is done by one thread in a fixed order, so results do not depend on the thread count.
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/vec_math.h"

#include "core/error.h"
#include "core/targets.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace ndt::cpu {
namespace {

// What the softmax part of the gradient is multiplied by: grad_scale x d(lse + z_loss x
// lse^2)/d(lse). Without the z-loss exactly grad_scale (the same bits as before it).
double softmax_scale(float grad_scale, float z_loss, double lse) {
  if (z_loss == 0.0f) return grad_scale;
  return static_cast<double>(grad_scale) * (1.0 + 2.0 * static_cast<double>(z_loss) * lse);
}

// sum_j exp(in[j] - mx) over j < V in double; with out (which may be in) the exps are
// also written there. Block by block: the exps in one float loop, then added into
// kLanes double sums by position (element j to sum j % kLanes, each in order), which are
// added in order at the end. GCC 12 leaves a loop that does both at once (a float exp
// beside a double reduction) scalar: 5-6x slower on a 50257-wide row. The lanes fix
// every addition, so the sum has the same bits on any thread count and instruction set.
double exp_sum(const float* in, float* out, int V, float mx) {
  constexpr int kBlock = 512, kLanes = 32;  // kBlock a multiple of kLanes
  alignas(64) float scratch[kBlock];
  double lanes[kLanes] = {};
  for (int j0 = 0; j0 < V; j0 += kBlock) {
    const int n = std::min(kBlock, V - j0);
    const float* x = in + j0;
    float* e = out ? out + j0 : scratch;
#pragma omp simd
    for (int j = 0; j < n; ++j) e[j] = exp_vec(x[j] - mx);
    int j = 0;
    for (; j + kLanes <= n; j += kLanes) {
      for (int l = 0; l < kLanes; ++l) lanes[l] += e[j + l];
    }
    for (int l = 0; j < n; ++j, ++l) lanes[l] += e[j];
  }
  double sum = 0.0;
  for (double lane : lanes) sum += lane;
  return sum;
}

// A masked row (kIgnoredTarget): no loss, no z-loss, no gradient.
void ignore_row(float* row, float* losses, float* z_losses, int n, int V, bool with_grad) {
  losses[n] = 0.0f;
  if (z_losses) z_losses[n] = 0.0f;
  if (with_grad) std::fill(row, row + V, 0.0f);
}

}  // namespace

void softmax_cross_entropy(float* logits, float* losses, const int32_t* targets, int N, int V,
                           float grad_scale, float z_loss, float* z_losses) {
  // Validate before touching anything (and outside the parallel region, where a throw
  // would terminate).
  for (int n = 0; n < N; ++n) {
    NDT_CHECK((targets[n] >= 0 && targets[n] < V) || targets[n] == kIgnoredTarget,
              "softmax_cross_entropy: target {} of row {} is outside [0, {}) and not the ignored target {}",
              targets[n], n, V, kIgnoredTarget);
  }
  const bool with_grad = grad_scale != 0.0f;

  // Small calls stay on the calling thread: a fork/join costs more than they do.
  const bool parallel = static_cast<int64_t>(N) * V >= (int64_t{1} << 15) && N > 1;

#pragma omp parallel for schedule(static) if (parallel)
  for (int n = 0; n < N; ++n) {
    float* row = logits + static_cast<int64_t>(n) * V;
    const int target = targets[n];
    if (target == kIgnoredTarget) {
      ignore_row(row, losses, z_losses, n, V, with_grad);
      continue;
    }
    const float target_logit = row[target];
    // (This form vectorises; std::max from j = 1 stays scalar with GCC 12.)
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < V; ++j) mx = row[j] > mx ? row[j] : mx;

    const double sum = exp_sum(row, with_grad ? row : nullptr, V, mx);
    const double lse = static_cast<double>(mx) + std::log(sum);
    losses[n] = static_cast<float>(lse - static_cast<double>(target_logit));
    if (z_losses) z_losses[n] = static_cast<float>(z_loss * lse * lse);
    if (with_grad) {
      const float f = static_cast<float>(softmax_scale(grad_scale, z_loss, lse) / sum);
#pragma omp simd
      for (int j = 0; j < V; ++j) row[j] *= f;
      row[target] -= grad_scale;
    }
  }
}

namespace {

// Small calls stay on the calling thread (same threshold as softmax_cross_entropy).
bool parallel_rows(int rows, int V) { return static_cast<int64_t>(rows) * V >= (int64_t{1} << 15) && rows > 1; }

}  // namespace

void cross_entropy_row_max(const float* logits, float* row_max, int rows, int V) {
#pragma omp parallel for schedule(static) if (parallel_rows(rows, V))
  for (int n = 0; n < rows; ++n) {
    const float* row = logits + int64_t{n} * V;
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < V; ++j) mx = row[j] > mx ? row[j] : mx;
    row_max[n] = mx;
  }
}

void cross_entropy_exp_sums(float* logits, const float* row_max, const int32_t* targets, int64_t vocab_begin,
                            float* sums, float* target_logit, int rows, int V, bool keep_exp) {
#pragma omp parallel for schedule(static) if (parallel_rows(rows, V))
  for (int n = 0; n < rows; ++n) {
    float* row = logits + int64_t{n} * V;
    const float mx = row_max[n];
    const int64_t t = targets[n] - vocab_begin;
    target_logit[n] = t >= 0 && t < V ? row[t] : 0.0f;
    sums[n] = static_cast<float>(exp_sum(row, keep_exp ? row : nullptr, V, mx));
  }
}

void cross_entropy_finish(float* logits, float* losses, const float* row_max, const float* sums,
                          const float* target_logit, const int32_t* targets, int64_t vocab_begin, int rows,
                          int V, float grad_scale, float z_loss, float* z_losses) {
  const bool with_grad = grad_scale != 0.0f;
#pragma omp parallel for schedule(static) if (parallel_rows(rows, V))
  for (int n = 0; n < rows; ++n) {
    if (targets[n] == kIgnoredTarget) {
      ignore_row(logits + int64_t{n} * V, losses, z_losses, n, V, with_grad);
      continue;
    }
    const double lse = static_cast<double>(row_max[n]) + std::log(static_cast<double>(sums[n]));
    losses[n] = static_cast<float>(lse - static_cast<double>(target_logit[n]));
    if (z_losses) z_losses[n] = static_cast<float>(z_loss * lse * lse);
    if (!with_grad) continue;
    float* row = logits + int64_t{n} * V;
    const float f = static_cast<float>(softmax_scale(grad_scale, z_loss, lse) / static_cast<double>(sums[n]));
#pragma omp simd
    for (int j = 0; j < V; ++j) row[j] *= f;
    const int64_t t = targets[n] - vocab_begin;
    if (t >= 0 && t < V) row[t] -= grad_scale;
  }
}

}  // namespace ndt::cpu
