// Table lookup (kernels/cpu/embedding.h). Forward: one thread per output element.
// Backward: one thread per column c walks the rows n = 0..N-1 in order and adds
// dout[n, c] into dtable[ids[n], c]: each element of dtable is summed by one thread in
// the CPU twin's order, so the result is deterministic without atomics. The _range forms
// (a vocabulary slice of the table) likewise.
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

// The vocabulary slice [vocab_begin, vocab_begin + local_vocab): zeros for ids it does not own.
__global__ void embedding_forward_range_kernel(float* out, const int32_t* ids, const float* table, int64_t vocab_begin,
                                               int64_t local_vocab, int64_t rows, int64_t C) {
  NDT_GRID_LOOP(i, rows * C) {
    const int64_t id = ids[i / C] - vocab_begin;
    out[i] = id >= 0 && id < local_vocab ? table[id * C + i % C] : 0.0f;
  }
}

__global__ void embedding_backward_range_kernel(float* dtable, const float* dout, const int32_t* ids,
                                                int64_t vocab_begin, int64_t local_vocab, int64_t rows, int64_t C) {
  NDT_GRID_LOOP(c, C) {
    for (int64_t n = 0; n < rows; ++n) {
      const int64_t id = ids[n] - vocab_begin;
      if (id >= 0 && id < local_vocab) dtable[id * C + c] += dout[n * C + c];
    }
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

void embedding_forward_range(float* out, const int32_t* ids, const float* table, int64_t vocab_begin,
                             int64_t local_vocab, int64_t rows, int64_t C) {
  if (rows * C <= 0) return;
  embedding_forward_range_kernel<<<blocks_for(rows * C), kThreads>>>(out, ids, table, vocab_begin, local_vocab, rows,
                                                                     C);
  check_launch("embedding_forward_range");
}

void embedding_backward_range(float* dtable, const float* dout, const int32_t* ids, int64_t vocab_begin,
                              int64_t local_vocab, int64_t rows, int64_t C) {
  if (rows <= 0 || C <= 0) return;
  embedding_backward_range_kernel<<<blocks_for(C), kThreads>>>(dtable, dout, ids, vocab_begin, local_vocab, rows, C);
  check_launch("embedding_backward_range");
}

}  // namespace ndt::cuda
