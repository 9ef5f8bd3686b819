// Small elementwise helpers used between kernels (residual adds, zeroing, copies,
// bias broadcast). Contract as elsewhere: "forward" writers overwrite (copy, fill,
// zero), accumulators add (+=): add_inplace, add_bias, bias_backward.
#pragma once

#include <cstdint>

namespace ndt::cpu {

void add_inplace(float* y, const float* x, int64_t n);  // y += x
void zero(float* x, int64_t n);

// dst[i] = src[i] for i < n; dst and src must not overlap. Threads split large copies.
void copy(float* dst, const float* src, int64_t n);
// x[i] = value for i < n.
void fill(float* x, float value, int64_t n);

// out[rows, C] += bias[C] on every row.
void add_bias(float* out, const float* bias, int64_t rows, int64_t C);
// dbias[C] += sum over rows of dout[rows, C], rows added in the fixed order n = 0..rows-1
// (threads split the columns, so the bits do not depend on the thread count).
void bias_backward(float* dbias, const float* dout, int64_t rows, int64_t C);

}  // namespace ndt::cpu
