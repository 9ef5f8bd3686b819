// The small elementwise helpers (kernels/cpu/elementwise.h) as grid-stride kernels.
// bias_backward gives one thread a column and adds the rows in order n = 0..rows-1, the
// CPU twin's order, with no atomics.
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace ndt::cuda {
namespace {

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  NDT_GRID_LOOP(i, n) y[i] += x[i];
}

__global__ void fill_kernel(float* x, float value, int64_t n) {
  NDT_GRID_LOOP(i, n) x[i] = value;
}

__global__ void add_bias_kernel(float* out, const float* bias, int64_t rows, int64_t C) {
  NDT_GRID_LOOP(i, rows * C) out[i] += bias[i % C];
}

__global__ void bias_backward_kernel(float* dbias, const float* dout, int64_t rows, int64_t C) {
  NDT_GRID_LOOP(c, C) {
    float sum = 0.0f;
    for (int64_t r = 0; r < rows; ++r) sum += dout[r * C + c];
    dbias[c] += sum;
  }
}

}  // namespace

void add_inplace(float* y, const float* x, int64_t n) {
  if (n <= 0) return;
  add_kernel<<<blocks_for(n), kThreads>>>(y, x, n);
  check_launch("add_inplace");
}

void zero(float* x, int64_t n) {
  if (n > 0) NDT_CUDA_CHECK(cudaMemsetAsync(x, 0, static_cast<size_t>(n) * sizeof(float)));
}

void copy(float* dst, const float* src, int64_t n) {
  if (n > 0) {
    NDT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice));
  }
}

void fill(float* x, float value, int64_t n) {
  if (n <= 0) return;
  fill_kernel<<<blocks_for(n), kThreads>>>(x, value, n);
  check_launch("fill");
}

void add_bias(float* out, const float* bias, int64_t rows, int64_t C) {
  if (rows * C <= 0) return;
  add_bias_kernel<<<blocks_for(rows * C), kThreads>>>(out, bias, rows, C);
  check_launch("add_bias");
}

void bias_backward(float* dbias, const float* dout, int64_t rows, int64_t C) {
  if (C <= 0) return;
  bias_backward_kernel<<<blocks_for(C), kThreads>>>(dbias, dout, rows, C);
  check_launch("bias_backward");
}

}  // namespace ndt::cuda
