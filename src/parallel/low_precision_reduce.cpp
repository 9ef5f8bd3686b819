#include "parallel/low_precision_reduce.h"

#include "kernels/kernels.h"

#include <vector>

namespace ndt {

Tensor round_for_reduction(DType dtype, const float* x, int64_t n) {
  Tensor staged = Tensor::empty({n}, dtype, MemTag::comm);
  kernels::cast_to_lowp(dtype, x, static_cast<uint16_t*>(staged.raw()), n);
  return staged;
}

void widen_reduced(const Tensor& staged, float* out, bool accumulate) {
  const int64_t n = staged.numel();
  const auto* bits = static_cast<const uint16_t*>(staged.raw());
  if (!accumulate) {
    kernels::cast_from_lowp(staged.dtype(), bits, out, n);
    return;
  }
  Tensor wide = Tensor::empty({n}, DType::f32, MemTag::comm);
  kernels::cast_from_lowp(staged.dtype(), bits, wide.data<float>(), n);
  kernels::add_inplace(out, wide.data<float>(), n);
}

}  // namespace ndt
