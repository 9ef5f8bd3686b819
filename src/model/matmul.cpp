#include "model/matmul.h"

#include "core/error.h"
#include "kernels/kernels.h"

namespace ndt {

namespace {

int rows_of(const Parameter& p) { return static_cast<int>(p.local_shape[0]); }
int cols_of(const Parameter& p) { return static_cast<int>(p.local_shape[1]); }

// An activation operand x [n] (a layer's input or output gradient) rounded into a
// workspace scratch: to the fp8 grid of (linear, role) for an fp8 linear (linear >= 0),
// else to the compute dtype.
const uint16_t* round_operand(const MatmulPrecision& mp, int linear, Fp8Linears::Role role, uint16_t* scratch,
                              const float* x, int64_t n) {
  if (linear < 0) return lowp_operand(mp, x, n, scratch);
  NDT_CHECK(n <= mp.capacity, "matmul operand of {} elements exceeds the workspace's {}", n, mp.capacity);
  mp.fp8->quantize(linear, role, x, scratch, n);
  return scratch;
}

// The weight as the matmul reads it: its compute copy, or for an fp8 linear its fp8
// grid (re-quantised from the fp32 value at each use, into the fp8 weight scratch).
const uint16_t* weight_operand(const MatmulPrecision& mp, int linear, const Parameter& weight) {
  if (linear < 0) return weight.compute_data();
  mp.fp8->quantize(linear, Fp8Linears::weight, weight.data(), mp.fp8->weight_scratch(), weight.numel());
  return mp.fp8->weight_scratch();
}

// The output gradient dout [N, OC] as the backward GEMMs' operand, its rows `ld` apart: an
// fp8 linear's on its e5m2 grid (contiguous rows), else in the compute dtype on rows
// lowp_row_stride(OC) apart.
struct OutputGradOperand {
  const uint16_t* bits;
  int ld;
};
OutputGradOperand output_grad_operand(const MatmulPrecision& mp, int linear, const float* dout, int N, int OC) {
  const int ld = static_cast<int>(lowp_row_stride(OC));
  if (linear >= 0 || ld == OC) {
    return {round_operand(mp, linear, Fp8Linears::output_grad, mp.a, dout, int64_t{N} * OC), OC};
  }
  NDT_CHECK(int64_t{N} * ld <= mp.capacity,
            "matmul output gradient of {} rows {} apart exceeds the workspace's {} elements", N, ld, mp.capacity);
  kernels::cast_rows_to_lowp(mp.dtype, dout, N, OC, mp.a, ld);
  return {mp.a, ld};
}

}  // namespace

const uint16_t* lowp_operand(const MatmulPrecision& mp, const float* x, int64_t n, uint16_t* scratch) {
  for (KeptOperand& k : mp.kept) {
    if (k.values != x || k.numel != n) continue;
    if (!k.written) kernels::cast_to_lowp(mp.dtype, x, k.bits, n);
    k.written = true;
    return k.bits;
  }
  NDT_CHECK(n <= mp.capacity, "matmul operand of {} elements exceeds the workspace's {}", n, mp.capacity);
  kernels::cast_to_lowp(mp.dtype, x, scratch, n);
  return scratch;
}

int64_t lowp_row_stride(int64_t cols) { return (cols + 31) / 32 * 32; }

bool used_only_in_matmuls(const ParameterSpec& s) {
  // The blocks' 2-D parameters include the LoRA adapters (model/lora.h); an MoE router's
  // logits GEMM reads its fp32 value (the router computes in fp32, model/moe.h).
  if (s.expert) return true;
  const bool router = s.name.ends_with(".moe.router.weight");
  return s.logical_shape.size() == 2 && ((s.name.starts_with("blocks.") && !router) || s.name == "lm_head.weight");
}

void matmul_forward(const MatmulPrecision& mp, float* out, const float* inp, const Parameter& weight,
                    const float* bias, int64_t rows) {
  const int OC = rows_of(weight), IC = cols_of(weight), N = static_cast<int>(rows);
  if (mp.dtype == DType::f32) {
    kernels::linear_forward(out, inp, weight.data(), bias, N, IC, OC);
    return;
  }
  // fp8 operands are bf16 values on the fp8 grids: the bf16 GEMM multiplies them exactly.
  const int f = mp.fp8 ? mp.fp8->find(weight) : -1;
  const kernels::ProfileScope fp8_scope(f >= 0 ? kernels::OpClass::gemm_fp8 : kernels::OpClass::untimed);
  const uint16_t* x = round_operand(mp, f, Fp8Linears::input, mp.a, inp, rows * IC);
  kernels::linear_forward_lowp(f >= 0 ? DType::bf16 : mp.dtype, out, x, weight_operand(mp, f, weight), bias, N, IC,
                               OC);
}

void matmul_backward(const MatmulPrecision& mp, float* dinp, bool weight_grad, float* dbias, const float* dout,
                     const float* inp, const Parameter& weight, int64_t rows) {
  matmul_backward_into(mp, dinp, weight_grad ? weight.trainable_grad() : nullptr, dbias, dout, inp, weight, rows);
}

void matmul_backward_into(const MatmulPrecision& mp, float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const Parameter& weight, int64_t rows) {
  const int OC = rows_of(weight), IC = cols_of(weight), N = static_cast<int>(rows);
  if (mp.dtype == DType::f32) {
    kernels::linear_backward(dinp, dweight, dbias, dout, inp, dinp ? weight.data() : nullptr, N, IC, OC);
    return;
  }
  if (dbias) kernels::bias_backward(dbias, dout, rows, OC);
  if (!dinp && !dweight) return;
  // An fp8 linear's output gradient on its e5m2 grid, the weight and the kept input
  // re-quantised on theirs (the input from the compute-dtype copy the block kept).
  const int f = mp.fp8 ? mp.fp8->find(weight) : -1;
  // An fp8 linear counts as an fp8 GEMM in profiles (kernels/profile.h), quantisation included.
  const kernels::ProfileScope fp8_scope(f >= 0 ? kernels::OpClass::gemm_fp8 : kernels::OpClass::untimed);
  const OutputGradOperand dy = output_grad_operand(mp, f, dout, N, OC);
  const uint16_t* x = dweight ? round_operand(mp, f, Fp8Linears::input, mp.b, inp, rows * IC) : nullptr;
  const uint16_t* w = dinp ? weight_operand(mp, f, weight) : nullptr;
  // linear_backward_lowp's two GEMMs, reading dy's rows dy.ld apart: dinp [N, IC] += dy W,
  // dweight [OC, IC] += dy^T x.
  const DType dtype = f >= 0 ? DType::bf16 : mp.dtype;
  if (dinp) kernels::gemm_lowp(dtype, false, false, N, IC, OC, dy.bits, dy.ld, w, IC, 1.0f, dinp, IC);
  if (dweight) kernels::gemm_lowp(dtype, true, false, OC, IC, N, dy.bits, dy.ld, x, IC, 1.0f, dweight, IC);
}

}  // namespace ndt
