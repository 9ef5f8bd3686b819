// Table lookup (kernels/cpu/embedding.h). Forward: one thread per output element.
// Backward: one thread per column c walks the rows n = 0..N-1 in order and adds
// dout[n, c] into dtable[ids[n], c]: each element of dtable is summed by one thread in
// the CPU twin's order, so the result is deterministic without atomics.
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace ndt::cuda {
namespace {

__global__ void embedding_forward_kernel(float* out, const int32_t* ids, const float* table, int N, int C,
                                         bool accumulate) {
  NDT_GRID_LOOP(i, static_cast<int64_t>(N) * C) {
    const float value = table[static_cast<int64_t>(ids[i / C]) * C + i % C];
    out[i] = accumulate ? out[i] + value : value;
  }
}

__global__ void embedding_backward_kernel(float* dtable, const float* dout, const int32_t* ids, int N, int C) {
  NDT_GRID_LOOP(c, C) {
    for (int n = 0; n < N; ++n) dtable[static_cast<int64_t>(ids[n]) * C + c] += dout[static_cast<int64_t>(n) * C + c];
  }
}

}  // namespace

void embedding_forward(float* out, const int32_t* ids, const float* table, int N, int C, bool accumulate) {
  if (static_cast<int64_t>(N) * C <= 0) return;
  embedding_forward_kernel<<<blocks_for(static_cast<int64_t>(N) * C), kThreads>>>(out, ids, table, N, C, accumulate);
  check_launch("embedding_forward");
}

void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int N, int C) {
  if (N <= 0 || C <= 0) return;
  embedding_backward_kernel<<<blocks_for(C), kThreads>>>(dtable, dout, ids, N, C);
  check_launch("embedding_backward");
}

}  // namespace ndt::cuda
