#include "model/expert_matmul.h"

#include "core/error.h"
#include "kernels/kernels.h"

#include <algorithm>
#include <vector>

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

// oneDNN builds a kernel for each GEMM shape it meets (about 2 ms each on the AMX Xeon;
// cached after), and an expert's row count changes with the routing at every step: in
// bf16 an MoE step spent more time building kernels than multiplying (730 builds, 1.6 s
// in 4 steps of llama-moe-tiny at d_model 512). So the low-precision GEMMs see row counts
// that are multiples of kRowQuantum only: an expert's rows are cut into the largest such
// multiple, done in place, and the rest, padded with zero rows in scratch (zero rows add
// exact zeros to the weight's gradient). The shapes of a run are then a few per weight.
constexpr int kRowQuantum = 64;

// The rest rows of one expert [rest, width] at the head of a zeroed [kRowQuantum, width]
// scratch. Scratch beside oneDNN's own: kRowQuantum rows, not on the ledger.
std::vector<uint16_t> padded_rows(const uint16_t* rows, int rest, int width) {
  std::vector<uint16_t> padded(static_cast<size_t>(kRowQuantum) * width, 0);
  std::copy_n(rows, int64_t{rest} * width, padded.data());
  return padded;
}

void expert_forward_lowp(DType dtype, float* out, const uint16_t* in, const uint16_t* w, int n, int IC, int OC) {
  const int whole = n / kRowQuantum * kRowQuantum, rest = n - whole;
  if (whole > 0) kernels::linear_forward_lowp(dtype, out, in, w, nullptr, whole, IC, OC);
  if (rest == 0) return;
  const std::vector<uint16_t> in_rest = padded_rows(in + int64_t{whole} * IC, rest, IC);
  std::vector<float> out_rest(static_cast<size_t>(kRowQuantum) * OC);
  kernels::linear_forward_lowp(dtype, out_rest.data(), in_rest.data(), w, nullptr, kRowQuantum, IC, OC);
  std::copy_n(out_rest.data(), int64_t{rest} * OC, out + int64_t{whole} * OC);
}

void expert_backward_lowp(DType dtype, float* din, float* dw, const uint16_t* dout, const uint16_t* in,
                          const uint16_t* w, int n, int IC, int OC) {
  const int whole = n / kRowQuantum * kRowQuantum, rest = n - whole;
  if (whole > 0) kernels::linear_backward_lowp(dtype, din, dw, dout, in, w, whole, IC, OC);
  if (rest == 0) return;
  const std::vector<uint16_t> dout_rest = padded_rows(dout + int64_t{whole} * OC, rest, OC);
  const std::vector<uint16_t> in_rest = padded_rows(in + int64_t{whole} * IC, rest, IC);
  std::vector<float> din_rest(din ? static_cast<size_t>(kRowQuantum) * IC : 0, 0.0f);
  kernels::linear_backward_lowp(dtype, din ? din_rest.data() : nullptr, dw, dout_rest.data(), in_rest.data(), w,
                                kRowQuantum, IC, OC);
  if (!din) return;
  kernels::add_inplace(din + int64_t{whole} * IC, din_rest.data(), int64_t{rest} * IC);
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
      expert_forward_lowp(dtype, out + row * w.OC, in.lowp() + row * w.IC, w16 + w.offset(le), n, w.IC, w.OC);
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
      expert_backward_lowp(dtype, dinp, dweight, dout.lowp() + row * w.OC, in.lowp() + row * w.IC,
                           w16 ? w16 + w.offset(le) : nullptr, n, w.IC, w.OC);
    }
    row += n;
  }
}

}  // namespace ndt
