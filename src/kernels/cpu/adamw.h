// AdamW step on fp32 master weights and moments (decoupled weight decay, Loshchilov
// & Hutter). Contract: updates param, m and v in place; grad is read only and is
// multiplied by grad_scale first (global-norm clipping, loss-scale removal).
#pragma once

#include <cstdint>

namespace ndt::cpu {

struct AdamWStep {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;  // applied as param -= lr * weight_decay * param
  float grad_scale;
  int64_t t;  // 1-based step count for bias correction
};

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWStep& step);

}  // namespace ndt::cpu
