// AdamW (kernels/cpu/adamw.h), one element per thread; the bias corrections are computed
// once on the host in double, as the CPU twin does.
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"

#include <cmath>

namespace ndt::cuda {
namespace {

struct AdamWScalars {
  float beta1, beta2, inv_bc1, inv_bc2, lr, eps, weight_decay, grad_scale;
};

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, AdamWScalars s) {
  NDT_GRID_LOOP(i, n) {
    const float g = grad[i] * s.grad_scale;
    const float mi = s.beta1 * m[i] + (1.0f - s.beta1) * g;
    const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float p = param[i];
    param[i] = p - s.lr * ((mi * s.inv_bc1) / (sqrtf(vi * s.inv_bc2) + s.eps) + s.weight_decay * p);
  }
}

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const cpu::AdamWStep& step) {
  if (n <= 0) return;
  const auto correction = [&](float beta) {
    return static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta), step.t)));
  };
  const AdamWScalars s{step.beta1, step.beta2, correction(step.beta1), correction(step.beta2),
                       step.lr,    step.eps,   step.weight_decay,      step.grad_scale};
  adamw_kernel<<<blocks_for(n), kThreads>>>(param, grad, m, v, n, s);
  check_launch("adamw_update");
}

}  // namespace ndt::cuda
