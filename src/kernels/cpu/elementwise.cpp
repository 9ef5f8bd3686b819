#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cstring>

namespace ndt::cpu {
namespace {

constexpr int64_t kChunk = 65536;  // floats per thread-chunk of zero / copy (256 KiB)
// Elements below which add_bias / fill stay on the calling thread (no fork/join cost).
constexpr int64_t kParallelMin = int64_t{1} << 15;

}  // namespace

void add_inplace(float* y, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void zero(float* x, int64_t n) {
  // Parallel so the first touch and the memory bandwidth of every thread are used.
#pragma omp parallel for schedule(static)
  for (int64_t chunk = 0; chunk < (n + kChunk - 1) / kChunk; ++chunk) {
    int64_t begin = chunk * kChunk, end = begin + kChunk < n ? begin + kChunk : n;
    std::memset(x + begin, 0, static_cast<size_t>(end - begin) * sizeof(float));
  }
}

void copy(float* dst, const float* src, int64_t n) {
  if (n <= 0) return;
  if (n <= kChunk) {  // one chunk: a plain memcpy on this thread
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  // Chunks as in zero: every thread's memory bandwidth (and first touch of dst).
#pragma omp parallel for schedule(static)
  for (int64_t chunk = 0; chunk < (n + kChunk - 1) / kChunk; ++chunk) {
    int64_t begin = chunk * kChunk, end = begin + kChunk < n ? begin + kChunk : n;
    std::memcpy(dst + begin, src + begin, static_cast<size_t>(end - begin) * sizeof(float));
  }
}

void fill(float* x, float value, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

void add_bias(float* out, const float* bias, int64_t rows, int64_t C) {
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t n = 0; n < rows; ++n) {
    float* row = out + n * C;
    for (int64_t c = 0; c < C; ++c) row[c] += bias[c];
  }
}

void bias_backward(float* dbias, const float* dout, int64_t rows, int64_t C) {
  // Each thread owns blocks of columns and adds every row into them in order 0..rows-1:
  // the sums of one thread, so the bits do not depend on the thread count. Blocks of 64
  // columns (4 cache lines) balance C = 768 or 3072 over 2 threads.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin && blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kBlock, c1 = std::min(c0 + kBlock, C);
    for (int64_t n = 0; n < rows; ++n) {
      const float* row = dout + n * C;
      for (int64_t c = c0; c < c1; ++c) dbias[c] += row[c];
    }
  }
}

}  // namespace ndt::cpu
