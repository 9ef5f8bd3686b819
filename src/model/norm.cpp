#include "model/norm.h"

#include "kernels/kernels.h"

namespace ndt {

void norm_forward(const ModelConfig& c, float* out, float* mean, float* rstd, const float* inp,
                  const Parameter& weight, const Parameter* bias, int64_t N) {
  if (c.arch == Arch::gpt2) {
    kernels::layernorm_forward(out, mean, rstd, inp, weight.data(), bias ? bias->data() : nullptr,
                               static_cast<int>(N), c.d_model, c.norm_eps);
  } else {
    kernels::rmsnorm_forward(out, rstd, inp, weight.data(), static_cast<int>(N), c.d_model, c.norm_eps);
  }
}

void norm_backward(const ModelConfig& c, float* dinp, float* dweight, float* dbias, const Parameter& weight,
                   const float* dout, const float* inp, const float* mean, const float* rstd, int64_t N) {
  if (c.arch == Arch::gpt2) {
    kernels::layernorm_backward(dinp, dweight, dbias, dout, inp, weight.data(), mean, rstd, static_cast<int>(N),
                                c.d_model);
  } else {
    kernels::rmsnorm_backward(dinp, dweight, dout, inp, weight.data(), rstd, static_cast<int>(N), c.d_model);
  }
}

}  // namespace ndt
