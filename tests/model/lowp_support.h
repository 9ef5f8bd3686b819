// What the low-precision model tests share: each bf16/f16 GEMM backend this CPU has (the
// tests force each), a value rounded to bf16, and smooth test data.
#pragma once

#include "core/dtype.h"
#include "kernels/cpu/gemm_lowp.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace ndt::testing {

// oneDNN where it has a native kernel for `dtype` on this CPU, and the fallback always.
inline std::vector<cpu::LowpGemmBackend> lowp_backends(DType dtype) {
  std::vector<cpu::LowpGemmBackend> out;
  if (!cpu::onednn_lowp_impl(dtype).empty()) out.push_back(cpu::LowpGemmBackend::onednn);
  out.push_back(cpu::LowpGemmBackend::fallback);
  return out;
}

// x rounded to bf16 (nearest even), as a double for the references' sums.
inline double bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// n values scale * sin(step * i + phase).
inline std::vector<float> wave(int64_t n, float scale, float step, float phase = 0.3f) {
  std::vector<float> x(static_cast<size_t>(n));
  for (size_t i = 0; i < x.size(); ++i) x[i] = scale * std::sin(step * static_cast<float>(i) + phase);
  return x;
}

}  // namespace ndt::testing
