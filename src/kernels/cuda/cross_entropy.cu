// Softmax cross-entropy with z-loss (kernels/cpu/cross_entropy.h), fused or in the three
// pieces of a vocab-parallel caller, one block per row: the block reduces the row's max, then its sum of exps in double (as the CPU twin),
// and overwrites the row with the gradient. Targets are checked first, on the device, and
// a bad one is refused before any row is touched, as on the CPU.
#include "core/targets.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"

#include <cfloat>

namespace ndt::cuda {
namespace {

constexpr int kRowThreads = 256;

__global__ void check_targets_kernel(const int32_t* targets, int N, int V, int* bad_row) {
  NDT_GRID_LOOP(n, N) {
    const int32_t t = targets[n];
    if (!((t >= 0 && t < V) || t == kIgnoredTarget)) atomicCAS(bad_row, 0, static_cast<int>(n) + 1);
  }
}

// The block's total of x (every thread gets it); Op: max or sum.
template <typename T, typename Op>
__device__ T block_reduce(T x, Op op) {
  __shared__ T partial[kRowThreads / kWarp];
  for (int offset = 16; offset > 0; offset >>= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, offset));
  if (threadIdx.x % kWarp == 0) partial[threadIdx.x / kWarp] = x;
  __syncthreads();
  T total = partial[0];
  for (int w = 1; w < kRowThreads / kWarp; ++w) total = op(total, partial[w]);
  __syncthreads();  // partial is reused by the next reduction
  return total;
}

__global__ void cross_entropy_kernel(float* logits, float* losses, const int32_t* targets, int V, float grad_scale,
                                     float z_loss, float* z_losses) {
  const int n = blockIdx.x;
  float* row = logits + static_cast<int64_t>(n) * V;
  const int target = targets[n];
  const bool with_grad = grad_scale != 0.0f;
  if (target == kIgnoredTarget) {
    if (threadIdx.x == 0) {
      losses[n] = 0.0f;
      if (z_losses) z_losses[n] = 0.0f;
    }
    if (with_grad) {
      for (int j = threadIdx.x; j < V; j += blockDim.x) row[j] = 0.0f;
    }
    return;
  }
  const float target_logit = row[target];
  float mx = -FLT_MAX;
  for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = block_reduce(mx, [](float a, float b) { return fmaxf(a, b); });
  double sum = 0.0;
  for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(row[j] - mx);
  sum = block_reduce(sum, [](double a, double b) { return a + b; });
  const double lse = static_cast<double>(mx) + log(sum);
  if (threadIdx.x == 0) {
    losses[n] = static_cast<float>(lse - static_cast<double>(target_logit));
    if (z_losses) z_losses[n] = static_cast<float>(z_loss * lse * lse);
  }
  if (!with_grad) return;
  // d(loss + z_loss lse^2)/dlogit = softmax (1 + 2 z_loss lse) - onehot, times grad_scale.
  const double scale = z_loss == 0.0f ? grad_scale : grad_scale * (1.0 + 2.0 * z_loss * lse);
  const float f = static_cast<float>(scale / sum);
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    row[j] = expf(row[j] - mx) * f - (j == target ? grad_scale : 0.0f);
  }
}

// The three pieces of a vocab-parallel caller (kernels/cpu/cross_entropy.h), one block per row.
__global__ void row_max_kernel(const float* logits, float* row_max, int V) {
  const float* row = logits + int64_t{blockIdx.x} * V;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = block_reduce(mx, [](float a, float b) { return fmaxf(a, b); });
  if (threadIdx.x == 0) row_max[blockIdx.x] = mx;
}

__global__ void exp_sums_kernel(float* logits, const float* row_max, const int32_t* targets, int64_t vocab_begin,
                                float* sums, float* target_logit, int V, bool keep_exp) {
  const int n = blockIdx.x;
  float* row = logits + int64_t{n} * V;
  const float mx = row_max[n];
  const int64_t t = targets[n] - vocab_begin;
  const float target = t >= 0 && t < V ? row[t] : 0.0f;  // read before the row may become exps
  __syncthreads();
  double sum = 0.0;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float e = expf(row[j] - mx);
    if (keep_exp) row[j] = e;
    sum += e;
  }
  sum = block_reduce(sum, [](double a, double b) { return a + b; });
  if (threadIdx.x == 0) {
    sums[n] = static_cast<float>(sum);
    target_logit[n] = target;
  }
}

__global__ void finish_kernel(float* logits, float* losses, const float* row_max, const float* sums,
                              const float* target_logit, const int32_t* targets, int64_t vocab_begin, int V,
                              float grad_scale, float z_loss, float* z_losses) {
  const int n = blockIdx.x;
  float* row = logits + int64_t{n} * V;
  const bool with_grad = grad_scale != 0.0f;
  if (targets[n] == kIgnoredTarget) {
    if (threadIdx.x == 0) {
      losses[n] = 0.0f;
      if (z_losses) z_losses[n] = 0.0f;
    }
    for (int j = threadIdx.x; with_grad && j < V; j += blockDim.x) row[j] = 0.0f;
    return;
  }
  const double lse = static_cast<double>(row_max[n]) + log(static_cast<double>(sums[n]));
  if (threadIdx.x == 0) {
    losses[n] = static_cast<float>(lse - static_cast<double>(target_logit[n]));
    if (z_losses) z_losses[n] = static_cast<float>(z_loss * lse * lse);
  }
  if (!with_grad) return;
  const double scale = z_loss == 0.0f ? grad_scale : grad_scale * (1.0 + 2.0 * z_loss * lse);
  const float f = static_cast<float>(scale / static_cast<double>(sums[n]));
  const int64_t t = targets[n] - vocab_begin;
  for (int j = threadIdx.x; j < V; j += blockDim.x) row[j] = row[j] * f - (j == t ? grad_scale : 0.0f);
}

}  // namespace

void softmax_cross_entropy(float* logits, float* losses, const int32_t* targets, int N, int V, float grad_scale,
                           float z_loss, float* z_losses) {
  if (N <= 0) return;
  check_targets_kernel<<<blocks_for(N), kThreads>>>(targets, N, V, bad_row_flag());
  check_launch("softmax_cross_entropy (targets)");
  if (const int64_t bad = take_bad_row(); bad >= 0) {
    int32_t target = 0;
    NDT_CUDA_CHECK(cudaMemcpy(&target, targets + bad, sizeof(target), cudaMemcpyDeviceToHost));
    refuse("softmax_cross_entropy: target " + std::to_string(target) + " of row " + std::to_string(bad) +
           " is outside [0, " + std::to_string(V) + ") and not the ignored target " + std::to_string(kIgnoredTarget));
  }
  cross_entropy_kernel<<<N, kRowThreads>>>(logits, losses, targets, V, grad_scale, z_loss, z_losses);
  check_launch("softmax_cross_entropy");
}

void cross_entropy_row_max(const float* logits, float* row_max, int rows, int V) {
  if (rows <= 0) return;
  row_max_kernel<<<rows, kRowThreads>>>(logits, row_max, V);
  check_launch("cross_entropy_row_max");
}

void cross_entropy_exp_sums(float* logits, const float* row_max, const int32_t* targets, int64_t vocab_begin,
                            float* sums, float* target_logit, int rows, int V, bool keep_exp) {
  if (rows <= 0) return;
  exp_sums_kernel<<<rows, kRowThreads>>>(logits, row_max, targets, vocab_begin, sums, target_logit, V, keep_exp);
  check_launch("cross_entropy_exp_sums");
}

void cross_entropy_finish(float* logits, float* losses, const float* row_max, const float* sums,
                          const float* target_logit, const int32_t* targets, int64_t vocab_begin, int rows, int V,
                          float grad_scale, float z_loss, float* z_losses) {
  if (rows <= 0) return;
  finish_kernel<<<rows, kRowThreads>>>(logits, losses, row_max, sums, target_logit, targets, vocab_begin, V,
                                       grad_scale, z_loss, z_losses);
  check_launch("cross_entropy_finish");
}

}  // namespace ndt::cuda
