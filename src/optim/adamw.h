// AdamW over a ParameterStore. The parameters are fp32, so the value arena is the
// fp32 master copy; the first and second moments are one fp32 buffer each, laid out
// like the arena. Weight decay applies only to parameters whose spec asks for it (by
// default the linear weight matrices; optim.weight_decay_policy, optim/weight_decay.h,
// can widen it).
#pragma once

#include "core/tensor.h"
#include "model/parameter.h"

namespace ndt {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

class AdamW {
 public:
  AdamW(ParameterStore& store, const AdamWConfig& config);

  // One update with learning rate lr; gradients are multiplied by grad_scale first.
  void step(float lr, float grad_scale);
  int64_t steps_taken() const { return t_; }
  // The moments, laid out like the parameter arena (checkpoints read and write them).
  float* exp_avg() { return m_.data<float>(); }
  float* exp_avg_sq() { return v_.data<float>(); }
  void set_steps_taken(int64_t t) { t_ = t; }

 private:
  ParameterStore& store_;
  AdamWConfig config_;
  Tensor m_, v_;
  int64_t t_ = 0;
};

}  // namespace ndt
