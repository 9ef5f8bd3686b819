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
#include <span>

namespace ndt {

// A matmul input that the micro-batch's context also keeps in the compute dtype (a block's
// packed activation, model/activations.h): a matmul reading `values` rounds them into
// `bits` the first time (then written) and reads `bits` afterwards, in forward and in
// backward, so the kept copy is the GEMM operand too and the input is rounded once.
struct KeptOperand {
  const float* values = nullptr;  // [numel], fp32, already on the compute dtype's grid
  uint16_t* bits = nullptr;       // [numel], compute dtype
  int64_t numel = 0;
  bool written = false;  // bits hold values rounded
};

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
  // The running block's kept operands (empty: none). fp8 linears quantise their inputs
  // from the fp32 values instead.
  std::span<KeptOperand> kept;
};

// Sets mp.kept for a scope (one pass of a block) and restores the previous ones at its end.
class KeptOperandsScope {
 public:
  KeptOperandsScope(MatmulPrecision& mp, std::span<KeptOperand> kept) : mp_(mp), previous_(mp.kept) { mp_.kept = kept; }
  ~KeptOperandsScope() { mp_.kept = previous_; }
  KeptOperandsScope(const KeptOperandsScope&) = delete;
  KeptOperandsScope& operator=(const KeptOperandsScope&) = delete;

 private:
  MatmulPrecision& mp_;
  std::span<KeptOperand> previous_;
};

// x [n] rounded to the compute dtype (bf16 or f16): its kept operand in mp.kept if it has
// one (rounded into it the first time), else rounded into scratch (mp.capacity elements).
const uint16_t* lowp_operand(const MatmulPrecision& mp, const float* x, int64_t n, uint16_t* scratch);

// The row stride of a low-precision output-gradient operand of `cols` columns: cols rounded
// up to 32 elements, so that each row starts 64 bytes after the last. oneDNN's
// AVX512-BF16 kernel multiplied GPT-2's output gradient of 50257 columns into the output
// layer's weight gradient 1.4-1.6x slower than one of 50272 (docs/performance.md, "The
// output layer's gradient on 64-byte rows"); the workspace's scratches are sized for it.
int64_t lowp_row_stride(int64_t cols);

// Whether the model reads this parameter only through matmuls (its compute copy in low
// precision): the blocks' 2-D weights, the routed experts' weights and an untied output
// layer. Not the embeddings (looked up; a tied one is both), norms, biases or an MoE
// router (its logits are computed in fp32). FSDP gathers these in the compute dtype, and
// the planner's communication model prices them so.
bool used_only_in_matmuls(const ParameterSpec& s);

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
