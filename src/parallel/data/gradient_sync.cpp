#include "parallel/data/gradient_sync.h"

#include <cmath>

namespace ndt {

void GradientSync::set_tensor_parallel(const ParameterStore& store, const TensorParallel& tp) {
  tp_ = tp;
  counted_.clear();
  for (const Parameter& p : store.params()) counted_.push_back(p.sharded_on(Axis::tp) || tp.rank() == 0);
}

void GradientSync::set_pipeline(const ParameterStore& store, Communicator* pp) {
  pp_ = pp;
  for (size_t p = 0; p < counted_.size(); ++p) counted_[p] = counted_[p] && !store.params()[p].pipeline_copy;
}

std::vector<StateSlice> GradientSync::state_slices() {
  std::vector<StateSlice> slices = layout_state_slices();
  for (StateSlice& s : slices) {
    s.saved = s.saved && (s.param->sharded_on(Axis::tp) || tp_.rank() == 0) && !s.param->pipeline_copy;
  }
  return slices;
}

double GradientSync::finish_norm(double sum_of_squares, double sharded_on_ep) const {
  if (ep_) {
    float experts = static_cast<float>(sharded_on_ep);
    ep_->all_reduce(&experts, 1, DType::f32, ReduceOp::sum);
    sum_of_squares += experts;
  } else {
    sum_of_squares += sharded_on_ep;
  }
  float sum = static_cast<float>(sum_of_squares);
  tp_all_reduce(tp_, &sum, 1, ReduceOp::sum);
  if (pp_ && pp_->size() > 1) pp_->all_reduce(&sum, 1, DType::f32, ReduceOp::sum);
  return std::sqrt(static_cast<double>(sum));
}

}  // namespace ndt
