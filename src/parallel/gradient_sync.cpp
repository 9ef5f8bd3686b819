#include "parallel/gradient_sync.h"

#include <cmath>

namespace ndt {

void GradientSync::set_tensor_parallel(const ParameterStore& store, const TensorParallel& tp) {
  tp_ = tp;
  counted_.clear();
  for (const Parameter& p : store.params()) counted_.push_back(p.sharded_on(Axis::tp) || tp.rank() == 0);
}

std::vector<StateSlice> GradientSync::state_slices() {
  std::vector<StateSlice> slices = layout_state_slices();
  for (StateSlice& s : slices) s.saved = s.saved && (s.param->sharded_on(Axis::tp) || tp_.rank() == 0);
  return slices;
}

double GradientSync::finish_norm(double sum_of_squares) const {
  float sum = static_cast<float>(sum_of_squares);
  tp_all_reduce(tp_, &sum, 1, ReduceOp::sum);
  return std::sqrt(static_cast<double>(sum));
}

}  // namespace ndt
