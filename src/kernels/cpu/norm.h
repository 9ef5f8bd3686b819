// LayerNorm and RMSNorm over the last dimension C of N rows.
// Contract: forward overwrites out and the saved statistics; backward adds (+=) into
// dinp, dweight and dbias.
#pragma once

namespace ndt::cpu {

// out = (inp - mean) * rstd * weight + bias; saves mean[N], rstd[N]. bias may be null.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C);

// out = inp * rstd * weight, rstd = 1 / sqrt(mean(inp^2) + eps); saves rstd[N].
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C);

}  // namespace ndt::cpu
