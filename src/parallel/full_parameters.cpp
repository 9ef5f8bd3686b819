#include "parallel/full_parameters.h"

#include "parallel/expert/expert_parallel.h"
#include "parallel/tensor/tensor_parallel.h"

#include <algorithm>

namespace ndt {

std::vector<float> gather_full_parameters(const ParameterStore& store, GradientSync& sync, DeviceMesh& mesh) {
  const std::vector<float> local = gather_expert_parallel(store, sync.full_parameters().data(), &mesh.axis(Axis::ep));
  std::vector<float> full = gather_tensor_parallel(store, local.data(), TensorParallel{&mesh.axis(Axis::tp)});
  if (mesh.size(Axis::pp) == 1) return full;
  int64_t offset = 0;
  for (const Parameter& p : store.params()) {
    const int64_t n = shape_numel(p.spec.logical_shape);
    if (p.pipeline_copy) std::fill(full.begin() + offset, full.begin() + offset + n, 0.0f);
    offset += n;
  }
  mesh.axis(Axis::pp).all_reduce(full.data(), full.size(), DType::f32, ReduceOp::sum);
  return full;
}

}  // namespace ndt
