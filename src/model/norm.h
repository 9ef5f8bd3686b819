// The norm each architecture uses: LayerNorm with bias for gpt2, RMSNorm for llama
// (bias and mean are then unused).
#pragma once

#include "model/config.h"
#include "model/parameter.h"

#include <cstdint>

namespace ndt {

void norm_forward(const ModelConfig& c, float* out, float* mean, float* rstd, const float* inp,
                  const Parameter& weight, const Parameter* bias, int64_t N);
// Adds the weight and bias gradients into dweight and dbias; dinp +=.
void norm_backward(const ModelConfig& c, float* dinp, float* dweight, float* dbias, const Parameter& weight,
                   const float* dout, const float* inp, const float* mean, const float* rstd, int64_t N);

}  // namespace ndt
