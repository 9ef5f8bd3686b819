// The matmuls of the linear layers, in the compute dtype of the precision policy
// (model/precision.h): fp32 through kernels::linear_*; bf16 or f16 by rounding the
// input and the output gradient into the workspace's 16-bit scratch and multiplying
// them with the parameter's compute copy (Parameter::compute) in the low-precision
// GEMM, which accumulates in fp32. Outputs and gradients are fp32 either way, with the
// accumulation contract of kernels::linear_backward (+=).
#pragma once

#include "core/dtype.h"
#include "model/fp8_linear.h"
#include "model/parameter.h"

#include <cstdint>

namespace ndt {

// The compute dtype and two scratch buffers of 16-bit elements, each large enough for
// the widest matmul operand of the micro-batch, fused projections' included (set by
// Workspace::fit).
struct MatmulPrecision {
  DType dtype = DType::f32;
  uint16_t* a = nullptr;
  uint16_t* b = nullptr;
  int64_t capacity = 0;  // elements of each scratch
  // precision.fp8: the fp8 linears (null: none); their matmuls round the operands to
  // the fp8 grids instead of to the compute dtype.
  Fp8Linears* fp8 = nullptr;
  // The fused projections' weights side by side where their compute copies are not
  // adjacent (model/fused_projections.h): 16-bit elements, fused_weights_capacity of them.
  uint16_t* fused_weights = nullptr;
  int64_t fused_weights_capacity = 0;
};

// Whether the model reads this parameter only through matmuls (its compute copy in low
// precision): the blocks' 2-D weights and an untied output layer. Not the embeddings
// (looked up; a tied one is both), norms or biases. FSDP gathers these in the compute dtype.
bool used_only_in_matmuls(const Parameter& p);

// out [rows, OC] = inp [rows, IC] W^T (+ bias), W = weight's local block [OC, IC].
void matmul_forward(const MatmulPrecision& mp, float* out, const float* inp, const Parameter& weight,
                    const float* bias, int64_t rows);
// dinp [rows, IC] += dout W (dinp may be null); with weight_grad, W's gradient += dout^T
// inp, unless W is frozen (no weight gradient then); dbias (may be null) += the column
// sums of dout (in fp32).
void matmul_backward(const MatmulPrecision& mp, float* dinp, bool weight_grad, float* dbias, const float* dout,
                     const float* inp, const Parameter& weight, int64_t rows);
// The same with the weight gradient added into dweight (W's shape; null: none) instead
// of W's gradient: a partial sum that the caller reduces.
void matmul_backward_into(const MatmulPrecision& mp, float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const Parameter& weight, int64_t rows);

}  // namespace ndt
