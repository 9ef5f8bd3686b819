// Elementwise activations. Contract: forward overwrites out; backward adds (+=).
#pragma once

#include <cstdint>

namespace ndt::cpu {

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);

// SwiGLU: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int64_t n);

}  // namespace ndt::cpu
