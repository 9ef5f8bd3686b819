// LayerNorm and RMSNorm (the llm.c formulas).
//
// Row statistics and dinp are computed with OpenMP over rows. The parameter gradients
// (dweight, dbias) are summed over rows in a second work-shared loop over blocks of
// columns: each thread owns whole columns and adds rows in the order n = 0..N-1, so the
// result is the same bit for bit for any thread count, with no atomics and no partial
// buffers. The row reductions use `omp simd reduction`, a fixed vectorised order.
#include "kernels/cpu/norm.h"

#include <cmath>
#include <cstdint>

namespace ndt::cpu {
namespace {

constexpr int kColBlock = 64;  // columns per task in the parameter-gradient pass
// Below this many elements the loops run on the calling thread (no fork/join cost).
constexpr int64_t kParallelMin = int64_t{1} << 14;

bool go_parallel(int N, int C) { return static_cast<int64_t>(N) * C >= kParallelMin; }

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if (go_parallel(N, C))
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<int64_t>(n) * C;
    float* o = out + static_cast<int64_t>(n) * C;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) sum += x[c];
    float m = sum / static_cast<float>(C);
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int c = 0; c < C; ++c) {
      float d = x[c] - m;
      sq += d * d;
    }
    float s = 1.0f / std::sqrt(sq / static_cast<float>(C) + eps);
    if (bias != nullptr) {
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    } else {
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c];
    }
    mean[n] = m;
    rstd[n] = s;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
  const int nblocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel if (go_parallel(N, C))
  {
    if (dinp != nullptr) {
#pragma omp for schedule(static)
      for (int n = 0; n < N; ++n) {
        const float* x = inp + static_cast<int64_t>(n) * C;
        const float* g = dout + static_cast<int64_t>(n) * C;
        float* dx = dinp + static_cast<int64_t>(n) * C;
        const float m = mean[n];
        const float s = rstd[n];
        // dnorm = weight * dout; dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm))
        float dnorm_mean = 0.0f;
        float dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
        for (int c = 0; c < C; ++c) {
          float norm = (x[c] - m) * s;
          float dnorm = weight[c] * g[c];
          dnorm_mean += dnorm;
          dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= static_cast<float>(C);
        dnorm_norm_mean /= static_cast<float>(C);
#pragma omp simd
        for (int c = 0; c < C; ++c) {
          float norm = (x[c] - m) * s;
          float dnorm = weight[c] * g[c];
          dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
      }
    }
    if (dweight != nullptr || dbias != nullptr) {
#pragma omp for schedule(static)
      for (int b = 0; b < nblocks; ++b) {
        const int c0 = b * kColBlock;
        const int w = c0 + kColBlock < C ? kColBlock : C - c0;
        float accw[kColBlock] = {};
        float accb[kColBlock] = {};
        for (int n = 0; n < N; ++n) {
          const float* x = inp + static_cast<int64_t>(n) * C + c0;
          const float* g = dout + static_cast<int64_t>(n) * C + c0;
          const float m = mean[n];
          const float s = rstd[n];
#pragma omp simd
          for (int c = 0; c < w; ++c) {
            accw[c] += (x[c] - m) * s * g[c];
            accb[c] += g[c];
          }
        }
        if (dweight != nullptr) {
          for (int c = 0; c < w; ++c) dweight[c0 + c] += accw[c];
        }
        if (dbias != nullptr) {
          for (int c = 0; c < w; ++c) dbias[c0 + c] += accb[c];
        }
      }
    }
  }
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps) {
#pragma omp parallel for schedule(static) if (go_parallel(N, C))
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<int64_t>(n) * C;
    float* o = out + static_cast<int64_t>(n) * C;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int c = 0; c < C; ++c) sq += x[c] * x[c];
    float s = 1.0f / std::sqrt(sq / static_cast<float>(C) + eps);
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = x[c] * s * weight[c];
    rstd[n] = s;
  }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C) {
  const int nblocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel if (go_parallel(N, C))
  {
    if (dinp != nullptr) {
#pragma omp for schedule(static)
      for (int n = 0; n < N; ++n) {
        const float* x = inp + static_cast<int64_t>(n) * C;
        const float* g = dout + static_cast<int64_t>(n) * C;
        float* dx = dinp + static_cast<int64_t>(n) * C;
        const float s = rstd[n];
        // norm = x * rstd; dnorm = weight * dout; dinp += rstd * (dnorm - norm * mean(dnorm * norm))
        float dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_norm_mean)
        for (int c = 0; c < C; ++c) dnorm_norm_mean += weight[c] * g[c] * x[c] * s;
        dnorm_norm_mean /= static_cast<float>(C);
#pragma omp simd
        for (int c = 0; c < C; ++c) {
          float norm = x[c] * s;
          dx[c] += (weight[c] * g[c] - norm * dnorm_norm_mean) * s;
        }
      }
    }
    if (dweight != nullptr) {
#pragma omp for schedule(static)
      for (int b = 0; b < nblocks; ++b) {
        const int c0 = b * kColBlock;
        const int w = c0 + kColBlock < C ? kColBlock : C - c0;
        float acc[kColBlock] = {};
        for (int n = 0; n < N; ++n) {
          const float* x = inp + static_cast<int64_t>(n) * C + c0;
          const float* g = dout + static_cast<int64_t>(n) * C + c0;
          const float s = rstd[n];
#pragma omp simd
          for (int c = 0; c < w; ++c) acc[c] += x[c] * s * g[c];
        }
        for (int c = 0; c < w; ++c) dweight[c0 + c] += acc[c];
      }
    }
  }
}

}  // namespace ndt::cpu
