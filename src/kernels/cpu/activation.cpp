// Elementwise activations, OpenMP-parallel and vectorised (`omp parallel for simd`).
// Each element is independent, so results do not depend on the thread count.
//
// Both activations are written in terms of the logistic sigmoid, evaluated with an
// inline expf that the compiler vectorises (glibc's expf/tanhf are only vectorised under
// -ffast-math; scalar tanhf made GELU ~18 ns/element, slower than memory by 30x).
//   GELU (tanh form): 0.5 x (1 + tanh u) = x * sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3);
//   d/dx = s + 2 x s (1 - s) du/dx with s = sigmoid(2u), since 1 - tanh^2 u = 4 s (1 - s).
// The sigmoid form is also more accurate in the negative tail than 1 + tanh(u), which
// cancels.
#include "kernels/cpu/activation.h"
#include "kernels/cpu/vec_math.h"

#include <bit>
#include <cstdint>

namespace ndt::cpu {
namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;
// Below this many elements the loops run on the calling thread (no fork/join cost).
constexpr int64_t kParallelMin = int64_t{1} << 14;

#pragma omp declare simd notinbranch
inline float sigmoid(float x) { return 1.0f / (1.0f + exp_vec(-x)); }

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float x = inp[i];
    float u = kGeluScale * (x + kGeluCubic * x * x * x);
    out[i] = x * sigmoid(2.0f * u);
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float x = inp[i];
    float u = kGeluScale * (x + kGeluCubic * x * x * x);
    float s = sigmoid(2.0f * u);
    float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    float grad = s + 2.0f * x * s * (1.0f - s) * du;
    dinp[i] += grad * dout[i];
  }
}

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i];
    out[i] = g * sigmoid(g) * up[i];
  }
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int64_t n) {
  // silu'(g) = sig(g) (1 + g (1 - sig(g))). dgate or dup may be null (skipped).
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i];
    float sig = sigmoid(g);
    float d = dout[i];
    if (dgate != nullptr) dgate[i] += d * up[i] * sig * (1.0f + g * (1.0f - sig));
    if (dup != nullptr) dup[i] += d * g * sig;
  }
}

}  // namespace ndt::cpu
