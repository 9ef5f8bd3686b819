#include "model/lora.h"

#include "core/tensor.h"
#include "kernels/kernels.h"
#include "model/tp_layers.h"

namespace ndt {

namespace {

int64_t rank_of(const LoraAdapter& l) { return l.a->local_shape[0]; }

void scale_inplace(float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

// h [rows, r] = scale x inp A^T: the adapter's intermediate (recomputed in backward).
Tensor scaled_down_projection(const MatmulPrecision& mp, const LoraAdapter& l, const float* inp, int64_t rows) {
  Tensor h = Tensor::empty({rows * rank_of(l)}, DType::f32, MemTag::activations);
  matmul_forward(mp, h.data<float>(), inp, *l.a, nullptr, rows);
  scale_inplace(h.data<float>(), l.scale, h.numel());
  return h;
}

float* gradient_of(const LoraAdapter& l, const Parameter* p) {
  return l.partial ? l.partial->grad(p) : p->trainable_grad();
}

}  // namespace

bool is_lora_parameter(const std::string& name) {
  auto ends_with = [&](const std::string& suffix) {
    return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".lora_a") || ends_with(".lora_b");
}

void LoraAdapter::forward(const MatmulPrecision& mp, float* out, const float* inp, int64_t rows) const {
  const int out_features = static_cast<int>(b->local_shape[0]), r = static_cast<int>(rank_of(*this));
  const Tensor h = scaled_down_projection(mp, *this, inp, rows);
  if (mp.dtype == DType::f32) {  // out += h B^T in place
    kernels::gemm(false, true, static_cast<int>(rows), out_features, r, 1.0f, h.data<float>(), r, b->data(), r, 1.0f,
                  out, out_features);
    return;
  }
  // The low-precision GEMM writes its output: through a [rows, out] scratch.
  Tensor y = Tensor::empty({rows * out_features}, DType::f32, MemTag::activations);
  matmul_forward(mp, y.data<float>(), h.data<float>(), *b, nullptr, rows);
  kernels::add_inplace(out, y.data<float>(), y.numel());
}

void LoraAdapter::backward(const MatmulPrecision& mp, float* dinp, const float* dout, const float* inp,
                           int64_t rows) const {
  // g [rows, r] = scale x dout B: A's output gradient.
  Tensor g = Tensor::zeros({rows * rank_of(*this)}, DType::f32, MemTag::activations);
  matmul_backward_into(mp, g.data<float>(), nullptr, nullptr, dout, nullptr, *b, rows);
  scale_inplace(g.data<float>(), scale, g.numel());
  matmul_backward_into(mp, dinp, gradient_of(*this, a), nullptr, g.data<float>(), inp, *a, rows);
  const Tensor h = scaled_down_projection(mp, *this, inp, rows);
  matmul_backward_into(mp, nullptr, gradient_of(*this, b), nullptr, dout, h.data<float>(), *b, rows);
}

}  // namespace ndt
