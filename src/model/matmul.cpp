#include "model/matmul.h"

#include "core/error.h"
#include "kernels/kernels.h"

#include <algorithm>

namespace ndt {

namespace {

int rows_of(const Parameter& p) { return static_cast<int>(p.local_shape[0]); }
int cols_of(const Parameter& p) { return static_cast<int>(p.local_shape[1]); }

// x [n] rounded into a scratch of the compute dtype.
const uint16_t* to_scratch(const MatmulPrecision& mp, uint16_t* scratch, const float* x, int64_t n) {
  NDT_CHECK(n <= mp.capacity, "matmul operand of {} elements exceeds the workspace's {}", n, mp.capacity);
  kernels::cast_to_lowp(mp.dtype, x, scratch, n);
  return scratch;
}

}  // namespace

bool used_only_in_matmuls(const Parameter& p) {
  return p.spec.logical_shape.size() == 2 && (p.name().rfind("blocks.", 0) == 0 || p.name() == "lm_head.weight");
}

void matmul_forward(const MatmulPrecision& mp, float* out, const float* inp, const Parameter& weight,
                    const float* bias, int64_t rows) {
  const int OC = rows_of(weight), IC = cols_of(weight), N = static_cast<int>(rows);
  if (mp.dtype == DType::f32) {
    kernels::linear_forward(out, inp, weight.data(), bias, N, IC, OC);
    return;
  }
  if (const int f = mp.fp8 ? mp.fp8->find(weight) : -1; f >= 0) {
    NDT_CHECK(rows * IC <= mp.capacity, "matmul operand of {} elements exceeds the workspace's {}", rows * IC,
              mp.capacity);
    mp.fp8->quantize(f, Fp8Linears::input, inp, mp.a, rows * IC);
    mp.fp8->quantize(f, Fp8Linears::weight, weight.data(), mp.fp8->weight_scratch(), weight.numel());
    kernels::linear_forward_lowp(DType::bf16, out, mp.a, mp.fp8->weight_scratch(), bias, N, IC, OC);
    return;
  }
  kernels::linear_forward_lowp(mp.dtype, out, to_scratch(mp, mp.a, inp, rows * IC), weight.compute_data(), bias, N,
                               IC, OC);
}

void matmul_backward(const MatmulPrecision& mp, float* dinp, bool weight_grad, float* dbias, const float* dout,
                     const float* inp, const Parameter& weight, int64_t rows) {
  const int OC = rows_of(weight), IC = cols_of(weight), N = static_cast<int>(rows);
  float* dweight = weight_grad ? weight.grad_data() : nullptr;
  if (mp.dtype == DType::f32) {
    kernels::linear_backward(dinp, dweight, dbias, dout, inp, dinp ? weight.data() : nullptr, N, IC, OC);
    return;
  }
  if (dbias) kernels::bias_backward(dbias, dout, rows, OC);
  if (!dinp && !dweight) return;
  if (const int f = mp.fp8 ? mp.fp8->find(weight) : -1; f >= 0) {
    // The output gradient on its e5m2 grid; the weight and the kept input re-quantised
    // on theirs (the input from the compute-dtype copy the block kept).
    NDT_CHECK(rows * std::max(OC, IC) <= mp.capacity, "matmul operand of {} elements exceeds the workspace's {}",
              rows * std::max(OC, IC), mp.capacity);
    mp.fp8->quantize(f, Fp8Linears::output_grad, dout, mp.a, rows * OC);
    const uint16_t* w = nullptr;
    const uint16_t* x = nullptr;
    if (dinp) {
      mp.fp8->quantize(f, Fp8Linears::weight, weight.data(), mp.fp8->weight_scratch(), weight.numel());
      w = mp.fp8->weight_scratch();
    }
    if (dweight) {
      mp.fp8->quantize(f, Fp8Linears::input, inp, mp.b, rows * IC);
      x = mp.b;
    }
    kernels::linear_backward_lowp(DType::bf16, dinp, dweight, mp.a, x, w, N, IC, OC);
    return;
  }
  const uint16_t* dy = to_scratch(mp, mp.a, dout, rows * OC);
  const uint16_t* x = weight_grad ? to_scratch(mp, mp.b, inp, rows * IC) : nullptr;
  kernels::linear_backward_lowp(mp.dtype, dinp, dweight, dy, x, dinp ? weight.compute_data() : nullptr, N, IC, OC);
}

}  // namespace ndt
