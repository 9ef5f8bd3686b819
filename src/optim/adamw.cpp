#include "optim/adamw.h"

#include "kernels/kernels.h"

namespace ndt {

AdamW::AdamW(ParameterStore& store, const AdamWConfig& config)
    : store_(store),
      config_(config),
      m_(Tensor::zeros({store.grad_numel()}, DType::f32, MemTag::optimizer)),
      v_(Tensor::zeros({store.grad_numel()}, DType::f32, MemTag::optimizer)) {
  NDT_CHECK(config.beta1 >= 0 && config.beta1 < 1, "optim.beta1 = {} must be in [0, 1)", config.beta1);
  NDT_CHECK(config.beta2 >= 0 && config.beta2 < 1, "optim.beta2 = {} must be in [0, 1)", config.beta2);
  NDT_CHECK(config.eps > 0, "optim.eps = {} must be positive", config.eps);
  NDT_CHECK(config.weight_decay >= 0, "optim.weight_decay = {} must not be negative",
            config.weight_decay);
}

void AdamW::step(float lr, float grad_scale) {
  ++t_;
  float* m = m_.data<float>();
  float* v = v_.data<float>();
  for (Parameter& p : store_.params()) {
    if (!p.trainable()) continue;
    kernels::AdamWStep s{lr,
                     config_.beta1,
                     config_.beta2,
                     config_.eps,
                     p.spec.weight_decay ? config_.weight_decay : 0.0f,
                     grad_scale,
                     t_};
    kernels::adamw_update(p.data(), p.grad_data(), m + p.grad_offset, v + p.grad_offset, p.numel(), s);
  }
}

}  // namespace ndt
