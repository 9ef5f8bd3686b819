#include "kernels/cpu/threads.h"

#include "core/error.h"

#include <cblas.h>
#include <omp.h>

namespace ndt::cpu {

void set_num_threads(int n) {
  NDT_CHECK(n >= 1, "number of threads must be >= 1, got {}", n);
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace ndt::cpu
