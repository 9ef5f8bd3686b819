#include "kernels/cpu/embedding.h"

#include <cstring>

namespace ndt::cpu {
namespace {

// Below this many elements the loops run on the calling thread (no fork/join cost).
constexpr int64_t kParallelMin = int64_t{1} << 14;

}  // namespace

void embedding_forward(float* out, const int32_t* ids, const float* table, int N, int C,
                       bool accumulate) {
#pragma omp parallel for schedule(static) if (static_cast<int64_t>(N) * C >= kParallelMin)
  for (int n = 0; n < N; ++n) {
    float* o = out + static_cast<int64_t>(n) * C;
    const float* row = table + static_cast<int64_t>(ids[n]) * C;
    if (accumulate) {
      for (int c = 0; c < C; ++c) o[c] += row[c];
    } else {
      for (int c = 0; c < C; ++c) o[c] = row[c];
    }
  }
}

void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int N, int C) {
  // Parallel over column blocks of C: every thread walks all n in order and owns its
  // columns of every table row, so there are no races and the summation order per
  // element is n = 0..N-1 whatever the thread count. Blocks are 64 floats (a 256-byte
  // span, four cache lines) so threads do not share cache lines in the interior.
  constexpr int kBlock = 64;
  int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (static_cast<int64_t>(N) * C >= kParallelMin)
  for (int b = 0; b < nblocks; ++b) {
    int c0 = b * kBlock;
    int c1 = c0 + kBlock < C ? c0 + kBlock : C;
    for (int n = 0; n < N; ++n) {
      float* d = dtable + static_cast<int64_t>(ids[n]) * C;
      const float* g = dout + static_cast<int64_t>(n) * C;
      for (int c = c0; c < c1; ++c) d[c] += g[c];
    }
  }
}

void embedding_forward_range(float* out, const int32_t* ids, const float* table, int64_t vocab_begin,
                             int64_t local_vocab, int64_t rows, int64_t C) {
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t n = 0; n < rows; ++n) {
    const int64_t id = ids[n] - vocab_begin;
    float* o = out + n * C;
    if (id >= 0 && id < local_vocab) {
      std::memcpy(o, table + id * C, static_cast<size_t>(C) * sizeof(float));
    } else {
      std::memset(o, 0, static_cast<size_t>(C) * sizeof(float));
    }
  }
}

void embedding_backward_range(float* dtable, const float* dout, const int32_t* ids, int64_t vocab_begin,
                              int64_t local_vocab, int64_t rows, int64_t C) {
  // As embedding_backward: threads own column blocks and walk every row in order, so
  // each element is dtable + dout[n0] + dout[n1] + ... in row order (the same bits as a
  // serial loop over rows) without a fork/join per row.
  constexpr int64_t kBlock = 64;
  const int64_t nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t b = 0; b < nblocks; ++b) {
    const int64_t c0 = b * kBlock;
    const int64_t c1 = c0 + kBlock < C ? c0 + kBlock : C;
    for (int64_t n = 0; n < rows; ++n) {
      const int64_t id = ids[n] - vocab_begin;
      if (id < 0 || id >= local_vocab) continue;
      float* d = dtable + id * C;
      const float* g = dout + n * C;
      for (int64_t c = c0; c < c1; ++c) d[c] += g[c];
    }
  }
}

}  // namespace ndt::cpu
