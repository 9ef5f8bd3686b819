// The routed experts' grouped GEMMs (model/moe.h). On the expert side each local expert's
// rows are contiguous (model/expert_dispatch.h), so every expert runs one GEMM per weight
// over its rows. In fp32 through kernels::linear_*; in a low compute dtype (bf16 or f16)
// each activation operand is rounded once into a 16-bit copy (ExpertOperand), and expert
// e multiplies it with its slice [e] of the weight's compute copy (Parameter::compute,
// the local block [E / ep, OC, IC] rounded once per step) in the low-precision GEMM,
// which sums the exact products in fp32: the dense layers' matmuls (model/matmul.h), per
// expert. Outputs and gradients are fp32 either way, with the accumulation contract of
// kernels::linear_* (forward overwrites, backward adds).
#pragma once

#include "core/tensor.h"
#include "model/expert_dispatch.h"
#include "model/parameter.h"

#include <cstdint>

namespace ndt {

// An expert-side activation [rows, width] as the experts' GEMMs read it: the fp32 values,
// and with a low dtype their rounding, cast once here (a transient copy, ledger tag
// activations). The fp32 values must outlive the operand.
class ExpertOperand {
 public:
  ExpertOperand(DType dtype, const float* x, int64_t numel);
  DType dtype() const { return dtype_; }
  const float* f32() const { return x_; }
  const uint16_t* lowp() const { return static_cast<const uint16_t*>(lowp_.raw()); }

 private:
  DType dtype_;
  const float* x_;
  Tensor lowp_;
};

// For each local expert e, over its rows: out [rows, OC] = in [rows, IC] W[e]^T, with
// W = weight's local block [E / ep, OC, IC]. In the operand's dtype.
void experts_linear_forward(const ExpertRoute& route, float* out, const ExpertOperand& in, const Parameter& weight);
// For each local expert e, over its rows: din [rows, IC] += dout W[e] (din may be null),
// and W[e]'s gradient += dout^T in unless the weight is frozen. dout and in share a dtype.
void experts_linear_backward(const ExpertRoute& route, float* din, const ExpertOperand& dout, const ExpertOperand& in,
                             const Parameter& weight);

}  // namespace ndt
