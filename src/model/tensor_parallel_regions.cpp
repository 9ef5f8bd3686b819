#include "model/tensor_parallel_regions.h"

#include "kernels/kernels.h"

namespace ndt {

void TensorParallelRegions::all_gather(const float* in, float* out, int64_t n) const { kernels::copy(out, in, n); }

}  // namespace ndt
