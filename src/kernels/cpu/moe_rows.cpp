#include "kernels/cpu/moe_rows.h"

#include <cstring>

namespace ndt::cpu {
namespace {

// Elements moved below which a call stays on the calling thread (no fork/join cost).
constexpr int64_t kParallelMin = int64_t{1} << 15;

}  // namespace

void moe_dispatch_rows(float* rows, const float* x, const int64_t* row_of_slot, int64_t N, int k, int64_t C) {
#pragma omp parallel for schedule(static) if (N * k * C >= kParallelMin)
  for (int64_t s = 0; s < N * k; ++s) {
    const int64_t r = row_of_slot[s];
    if (r >= 0) std::memcpy(rows + r * C, x + (s / k) * C, static_cast<size_t>(C) * sizeof(float));
  }
}

void moe_combine(float* out, const float* y, const int64_t* row_of_slot, const float* weight, int64_t N, int k,
                 int64_t C) {
#pragma omp parallel for schedule(static) if (N * k * C >= kParallelMin)
  for (int64_t t = 0; t < N; ++t) {
    float* o = out + t * C;
    for (int j = 0; j < k; ++j) {
      const int64_t r = row_of_slot[t * k + j];
      if (r < 0) continue;
      const float w = weight[t * k + j];
      const float* yr = y + r * C;
      for (int64_t i = 0; i < C; ++i) o[i] += w * yr[i];
    }
  }
}

void moe_combine_backward(float* drows, float* dweight, const float* dout, const float* y, const int64_t* row_of_slot,
                          const float* weight, int64_t N, int k, int64_t C) {
#pragma omp parallel for schedule(static) if (N * k * C >= kParallelMin)
  for (int64_t t = 0; t < N; ++t) {
    const float* g = dout + t * C;
    for (int j = 0; j < k; ++j) {
      const int64_t r = row_of_slot[t * k + j];
      if (r < 0) continue;
      const float w = weight[t * k + j];
      const float* yr = y + r * C;
      float* d = drows + r * C;
      double dot = 0;
      for (int64_t i = 0; i < C; ++i) dot += static_cast<double>(g[i]) * yr[i], d[i] = w * g[i];
      dweight[t * k + j] = static_cast<float>(dot);
    }
  }
}

void moe_gather_add(float* dx, const float* drows, const int64_t* row_of_slot, int64_t N, int k, int64_t C) {
#pragma omp parallel for schedule(static) if (N * k * C >= kParallelMin)
  for (int64_t t = 0; t < N; ++t) {
    float* d = dx + t * C;
    for (int j = 0; j < k; ++j) {
      const int64_t r = row_of_slot[t * k + j];
      if (r < 0) continue;
      const float* src = drows + r * C;
      for (int64_t i = 0; i < C; ++i) d[i] += src[i];
    }
  }
}

}  // namespace ndt::cpu
