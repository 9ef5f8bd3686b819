// GELU (tanh form) and SwiGLU (kernels/cpu/activation.h), one element per thread, in
// the sigmoid form the CPU twin uses: 0.5 x (1 + tanh u) = x sigmoid(2u).
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace ndt::cuda {
namespace {

__device__ inline float logistic(float x) { return 1.0f / (1.0f + expf(-x)); }

// u = sqrt(2/pi) (x + 0.044715 x^3) and du/dx.
__device__ inline float gelu_u(float x) { return 0.7978845608028654f * x * (1.0f + 0.044715f * x * x); }
__device__ inline float gelu_du(float x) { return 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x); }

__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n) {
  NDT_GRID_LOOP(i, n) out[i] = inp[i] * logistic(2.0f * gelu_u(inp[i]));
}

// d/dx x s(2u) = s + 2 x s (1 - s) du/dx.
__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t n) {
  NDT_GRID_LOOP(i, n) {
    const float x = inp[i], s = logistic(2.0f * gelu_u(x));
    dinp[i] += (s + 2.0f * x * s * (1.0f - s) * gelu_du(x)) * dout[i];
  }
}

__global__ void swiglu_forward_kernel(float* out, const float* gate, const float* up, int64_t n) {
  NDT_GRID_LOOP(i, n) out[i] = gate[i] * logistic(gate[i]) * up[i];
}

// silu'(g) = s (1 + g (1 - s)); dgate or dup may be null.
__global__ void swiglu_backward_kernel(float* dgate, float* dup, const float* dout, const float* gate,
                                       const float* up, int64_t n) {
  NDT_GRID_LOOP(i, n) {
    const float g = gate[i], s = logistic(g);
    if (dgate) dgate[i] += dout[i] * up[i] * s * (1.0f + g * (1.0f - s));
    if (dup) dup[i] += dout[i] * g * s;
  }
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
  if (n <= 0) return;
  gelu_forward_kernel<<<blocks_for(n), kThreads>>>(out, inp, n);
  check_launch("gelu_forward");
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  if (n <= 0) return;
  gelu_backward_kernel<<<blocks_for(n), kThreads>>>(dinp, inp, dout, n);
  check_launch("gelu_backward");
}

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
  if (n <= 0) return;
  swiglu_forward_kernel<<<blocks_for(n), kThreads>>>(out, gate, up, n);
  check_launch("swiglu_forward");
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n) {
  if (n <= 0 || (!dgate && !dup)) return;
  swiglu_backward_kernel<<<blocks_for(n), kThreads>>>(dgate, dup, dout, gate, up, n);
  check_launch("swiglu_backward");
}

}  // namespace ndt::cuda
