// LayerNorm and RMSNorm (kernels/cpu/norm.h). Row statistics and dinp: one warp per row,
// its 32 lanes striding the C columns, the sums reduced across the warp. dweight and
// dbias: one thread per column adding rows in order n = 0..N-1 (the CPU twin's order;
// no atomics, so the result does not depend on the launch).
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace ndt::cuda {
namespace {

constexpr int kRowsPerBlock = kThreads / kWarp;

// The row this warp owns, or -1 past the last.
__device__ inline int warp_row(int N) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  return row < N ? row : -1;
}

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int N, int C, float eps) {
  const int n = warp_row(N), lane = threadIdx.x % kWarp;
  if (n < 0) return;
  const float* x = inp + static_cast<int64_t>(n) * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += kWarp) sum += x[c];
  const float m = warp_sum(sum) / static_cast<float>(C);
  float sq = 0.0f;
  for (int c = lane; c < C; c += kWarp) sq += (x[c] - m) * (x[c] - m);
  const float s = 1.0f / sqrtf(warp_sum(sq) / static_cast<float>(C) + eps);
  float* o = out + static_cast<int64_t>(n) * C;
  for (int c = lane; c < C; c += kWarp) o[c] = (x[c] - m) * s * weight[c] + (bias ? bias[c] : 0.0f);
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

// dinp += rstd (dnorm - mean(dnorm) - norm mean(dnorm norm)), dnorm = weight dout.
__global__ void layernorm_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                      const float* mean, const float* rstd, int N, int C) {
  const int n = warp_row(N), lane = threadIdx.x % kWarp;
  if (n < 0) return;
  const int64_t base = static_cast<int64_t>(n) * C;
  const float m = mean[n], s = rstd[n];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int c = lane; c < C; c += kWarp) {
    const float dnorm = weight[c] * dout[base + c];
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * (inp[base + c] - m) * s;
  }
  const float dnorm_mean = warp_sum(dnorm_sum) / static_cast<float>(C);
  const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / static_cast<float>(C);
  for (int c = lane; c < C; c += kWarp) {
    const float norm = (inp[base + c] - m) * s;
    dinp[base + c] += (weight[c] * dout[base + c] - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

// dweight[c] += sum_n norm[n, c] dout[n, c], dbias[c] += sum_n dout[n, c]; mean null: RMSNorm.
__global__ void norm_params_kernel(float* dweight, float* dbias, const float* dout, const float* inp,
                                   const float* mean, const float* rstd, int N, int C) {
  NDT_GRID_LOOP(c, C) {
    float accw = 0.0f, accb = 0.0f;
    for (int n = 0; n < N; ++n) {
      const int64_t i = static_cast<int64_t>(n) * C + c;
      accw += (inp[i] - (mean ? mean[n] : 0.0f)) * rstd[n] * dout[i];
      accb += dout[i];
    }
    if (dweight) dweight[c] += accw;
    if (dbias) dbias[c] += accb;
  }
}

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                                       float eps) {
  const int n = warp_row(N), lane = threadIdx.x % kWarp;
  if (n < 0) return;
  const int64_t base = static_cast<int64_t>(n) * C;
  float sq = 0.0f;
  for (int c = lane; c < C; c += kWarp) sq += inp[base + c] * inp[base + c];
  const float s = 1.0f / sqrtf(warp_sum(sq) / static_cast<float>(C) + eps);
  for (int c = lane; c < C; c += kWarp) out[base + c] = inp[base + c] * s * weight[c];
  if (lane == 0) rstd[n] = s;
}

// dinp += rstd (dnorm - norm mean(dnorm norm)).
__global__ void rmsnorm_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                    const float* rstd, int N, int C) {
  const int n = warp_row(N), lane = threadIdx.x % kWarp;
  if (n < 0) return;
  const int64_t base = static_cast<int64_t>(n) * C;
  const float s = rstd[n];
  float acc = 0.0f;
  for (int c = lane; c < C; c += kWarp) acc += weight[c] * dout[base + c] * inp[base + c] * s;
  const float dnorm_norm_mean = warp_sum(acc) / static_cast<float>(C);
  for (int c = lane; c < C; c += kWarp) {
    dinp[base + c] += (weight[c] * dout[base + c] - inp[base + c] * s * dnorm_norm_mean) * s;
  }
}

unsigned row_blocks(int N) { return static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps) {
  if (N <= 0) return;
  layernorm_forward_kernel<<<row_blocks(N), kThreads>>>(out, mean, rstd, inp, weight, bias, N, C, eps);
  check_launch("layernorm_forward");
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
  if (N <= 0) return;
  if (dinp) layernorm_dinp_kernel<<<row_blocks(N), kThreads>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  if (dweight || dbias) norm_params_kernel<<<blocks_for(C), kThreads>>>(dweight, dbias, dout, inp, mean, rstd, N, C);
  check_launch("layernorm_backward");
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) {
  if (N <= 0) return;
  rmsnorm_forward_kernel<<<row_blocks(N), kThreads>>>(out, rstd, inp, weight, N, C, eps);
  check_launch("rmsnorm_forward");
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C) {
  if (N <= 0) return;
  if (dinp) rmsnorm_dinp_kernel<<<row_blocks(N), kThreads>>>(dinp, dout, inp, weight, rstd, N, C);
  if (dweight) norm_params_kernel<<<blocks_for(C), kThreads>>>(dweight, nullptr, dout, inp, nullptr, rstd, N, C);
  check_launch("rmsnorm_backward");
}

}  // namespace ndt::cuda
