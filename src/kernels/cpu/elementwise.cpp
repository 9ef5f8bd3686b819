#include "kernels/cpu/elementwise.h"

#include <cstring>

namespace ndt::cpu {

void add_inplace(float* y, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void zero(float* x, int64_t n) {
  // Parallel so the first touch and the memory bandwidth of every thread are used.
#pragma omp parallel for schedule(static)
  for (int64_t chunk = 0; chunk < (n + 65535) / 65536; ++chunk) {
    int64_t begin = chunk * 65536, end = begin + 65536 < n ? begin + 65536 : n;
    std::memset(x + begin, 0, static_cast<size_t>(end - begin) * sizeof(float));
  }
}

}  // namespace ndt::cpu
