// Small elementwise helpers used between kernels (residual adds, zeroing).
#pragma once

#include <cstdint>

namespace ndt::cpu {

void add_inplace(float* y, const float* x, int64_t n);  // y += x
void zero(float* x, int64_t n);

}  // namespace ndt::cpu
