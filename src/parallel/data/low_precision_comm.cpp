#include "parallel/data/low_precision_comm.h"

#include "kernels/kernels.h"

#include <vector>

namespace ndt {

Tensor round_for_sending(DType dtype, const float* x, int64_t n) {
  Tensor staged = Tensor::empty({n}, dtype, MemTag::comm);
  kernels::cast_to_lowp(dtype, x, static_cast<uint16_t*>(staged.raw()), n);
  return staged;
}

void widen_received(const Tensor& received, float* out, bool accumulate) {
  const int64_t n = received.numel();
  const auto* bits = static_cast<const uint16_t*>(received.raw());
  if (!accumulate) {
    kernels::cast_from_lowp(received.dtype(), bits, out, n);
    return;
  }
  Tensor wide = Tensor::empty({n}, DType::f32, MemTag::comm);
  kernels::cast_from_lowp(received.dtype(), bits, wide.data<float>(), n);
  kernels::add_inplace(out, wide.data<float>(), n);
}

}  // namespace ndt
