#include "model/expert_matmul.h"

#include "core/error.h"
#include "kernels/kernels.h"

namespace ndt {

ExpertOperand::ExpertOperand(DType dtype, const float* x, int64_t numel) : dtype_(dtype), x_(x) {
  if (dtype == DType::f32) return;
  lowp_ = Tensor::empty({numel}, dtype, MemTag::activations);
  kernels::cast_to_lowp(dtype, x, static_cast<uint16_t*>(lowp_.raw()), numel);
}

namespace {

// The expert weight's shape per expert: its local block [E / ep, OC, IC].
struct ExpertWeight {
  explicit ExpertWeight(const Parameter& w)
      : OC(static_cast<int>(w.local_shape[1])), IC(static_cast<int>(w.local_shape[2])) {}
  int64_t offset(int le) const { return int64_t{le} * OC * IC; }
  int OC, IC;
};

// The weight the experts multiply in dtype: its compute copy (checked to exist).
const uint16_t* compute_copy(const Parameter& weight, DType dtype) {
  NDT_CHECK(weight.compute.defined() && weight.compute.dtype() == dtype,
            "{} has no {} compute copy for the experts' GEMMs", weight.name(), dtype_name(dtype));
  return weight.compute_data();
}

}  // namespace

void experts_linear_forward(const ExpertRoute& route, float* out, const ExpertOperand& in, const Parameter& weight) {
  const ExpertWeight w(weight);
  const DType dtype = in.dtype();
  const uint16_t* w16 = dtype == DType::f32 ? nullptr : compute_copy(weight, dtype);
  int64_t row = 0;
  for (int le = 0; le < route.local_experts; ++le) {
    const int n = static_cast<int>(route.expert_count(le));
    if (n == 0) continue;
    if (dtype == DType::f32) {
      kernels::linear_forward(out + row * w.OC, in.f32() + row * w.IC, weight.data() + w.offset(le), nullptr, n, w.IC,
                              w.OC);
    } else {
      kernels::linear_forward_lowp(dtype, out + row * w.OC, in.lowp() + row * w.IC, w16 + w.offset(le), nullptr, n,
                                   w.IC, w.OC);
    }
    row += n;
  }
}

void experts_linear_backward(const ExpertRoute& route, float* din, const ExpertOperand& dout, const ExpertOperand& in,
                             const Parameter& weight) {
  const ExpertWeight w(weight);
  const DType dtype = dout.dtype();
  NDT_CHECK(in.dtype() == dtype, "experts' GEMM operands in {} and {}", dtype_name(dtype), dtype_name(in.dtype()));
  const uint16_t* w16 = dtype == DType::f32 || !din ? nullptr : compute_copy(weight, dtype);
  int64_t row = 0;
  for (int le = 0; le < route.local_experts; ++le) {
    const int n = static_cast<int>(route.expert_count(le));
    if (n == 0) continue;
    // A frozen weight has no gradient; the input gradient still flows.
    float* dweight = weight.trainable() ? weight.grad_data() + w.offset(le) : nullptr;
    float* dinp = din ? din + row * w.IC : nullptr;
    if (dtype == DType::f32) {
      kernels::linear_backward(dinp, dweight, nullptr, dout.f32() + row * w.OC, in.f32() + row * w.IC,
                               weight.data() + w.offset(le), n, w.IC, w.OC);
    } else {
      kernels::linear_backward_lowp(dtype, dinp, dweight, dout.lowp() + row * w.OC, in.lowp() + row * w.IC,
                                    w16 ? w16 + w.offset(le) : nullptr, n, w.IC, w.OC);
    }
    row += n;
  }
}

}  // namespace ndt
