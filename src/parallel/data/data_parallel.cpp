#include "parallel/data/data_parallel.h"

#include "core/error.h"
#include "core/timing.h"
#include "optim/clip.h"
#include "parallel/data/low_precision_comm.h"

#include <chrono>
#include <cmath>

namespace ndt {

DataParallel::DataParallel(ParameterStore& store, Communicator& dp, size_t bucket_bytes, const AdamWConfig& adamw,
                           DType reduce_dtype, Communicator& edp)
    : store_(store),
      dp_(dp),
      edp_(edp),
      reduce_dtype_(reduce_dtype),
      optimizer_(store, adamw),
      scheduler_(make_gradient_buckets(store, bucket_bytes, groups()),
                 [this](size_t b) { return launch(b); }, [this](size_t b) { unstage(b); }) {
  staging_.resize(scheduler_.buckets().size());
}

std::vector<Communicator*> DataParallel::groups() const {
  std::vector<Communicator*> groups;
  for (const Parameter& p : store_.params()) groups.push_back(group(p));
  return groups;
}

void DataParallel::unstage(size_t b) {
  if (!staging_[b].defined()) return;
  widen_received(staging_[b], store_.grads().data<float>() + scheduler_.buckets()[b].begin, /*accumulate=*/false);
  staging_[b] = Tensor();
}

void DataParallel::begin_backward(bool sync) { scheduler_.begin(sync && dp_.size() > 1); }

WorkHandle DataParallel::launch(size_t b) {
  const GradientBucket& bucket = scheduler_.buckets()[b];
  // Experts held by one rank alone (ep = dp_cp: edp of size 1) have their whole gradient.
  if (bucket.comm->size() == 1) return nullptr;
  float* grads = store_.grads().data<float>() + bucket.begin;
  const int64_t n = bucket.end - bucket.begin;
  if (reduce_dtype_ == DType::f32) {
    if (two_level_ && bucket.comm == &dp_) return two_level_->start(grads, static_cast<size_t>(n));
    return bucket.comm->iall_reduce(grads, static_cast<size_t>(n), DType::f32, ReduceOp::sum);
  }
  staging_[b] = round_for_sending(reduce_dtype_, grads, n);
  return bucket.comm->iall_reduce(staging_[b].raw(), static_cast<size_t>(n), reduce_dtype_, ReduceOp::sum);
}

void DataParallel::after_backward(int unit) { scheduler_.grads_ready_from(store_.unit_grad_begin(unit)); }

void DataParallel::poll() { scheduler_.poll(); }

void DataParallel::finish_backward() {
  if (!scheduler_.syncing()) return;
  const auto t0 = std::chrono::steady_clock::now();
  scheduler_.wait_all();
  exposed_wait_seconds_ += seconds_since(t0);
}

void DataParallel::set_reduction(DpReduction reduction, size_t bucket_bytes) {
  if (reduction == DpReduction::flat) return;
  if (reduce_dtype_ != DType::f32) {
    reduction_note_ = "gradients reduced flat (the hierarchical reduction sums in f32 only)";
    return;
  }
  two_level_ = std::make_unique<TwoLevelAllReduce>(dp_);
  if (reduction == DpReduction::automatic) {
    const size_t floats = std::min<size_t>(bucket_bytes / sizeof(float), static_cast<size_t>(store_.grad_numel()));
    const ReductionTiming timing = time_reductions(dp_, *two_level_, std::max<size_t>(floats, 1));
    reduction_note_ = "reduction measured at start: " + timing.describe(floats * sizeof(float));
    if (!timing.hierarchical_faster()) two_level_.reset();
    return;
  }
  reduction_note_ = "hierarchical reduction: inside nodes, then across";
}

double DataParallel::grad_norm() {
  // Gradients are replicated over dp after the all-reduce: every dp rank computes the same norm.
  const std::vector<char>* counted = counted_in_norm();
  if (counted == nullptr) return std::sqrt(sum_of_squares(store_.grads().data<float>(), store_.grad_numel()));
  double sum = 0, experts = 0;  // experts: the gradients sharded on ep, summed over ep by finish_norm
  for (size_t p = 0; p < counted->size(); ++p) {
    const Parameter& param = store_.params()[p];
    if ((*counted)[p] && param.trainable()) (param.sharded_on(Axis::ep) ? experts : sum) += sum_of_squares(param.grad_data(), param.numel());
  }
  return finish_norm(sum, experts);
}

void DataParallel::step(float lr, float grad_scale) { optimizer_.step(lr, grad_scale); }

std::vector<StateSlice> DataParallel::layout_state_slices() {
  // Replicated over dp: each parameter (its value and moments) is written by one dp
  // rank, chosen to balance the bytes (balanced_writers). An expert block (sharded on
  // ep) is replicated over edp only: one edp rank writes it, balanced among the experts.
  std::vector<StateSlice> slices;
  const std::vector<Parameter>& params = store_.params();
  std::vector<Communicator*> groups = {&dp_};
  if (&edp_ != &dp_) groups.push_back(&edp_);  // with ep = 1, edp is dp_cp
  std::vector<char> writes(params.size());
  for (Communicator* comm : groups) {
    std::vector<size_t> members;
    std::vector<Parameter> held;
    for (size_t i = 0; i < params.size(); ++i) {
      if (group(params[i]) == comm) members.push_back(i), held.push_back(params[i]);
    }
    const std::vector<int> writer = balanced_writers(held, comm->size());
    for (size_t k = 0; k < members.size(); ++k) writes[members[k]] = writer[k] == comm->rank();
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter& p = params[i];
    const bool saved = writes[i] != 0;
    const int64_t rows = p.local_shape[0];
    slices.push_back({StateSlice::value, &p, 0, rows, p.data(), saved});
    if (!p.trainable()) continue;  // no moments
    slices.push_back({StateSlice::exp_avg, &p, 0, rows, optimizer_.exp_avg() + p.grad_offset, saved});
    slices.push_back({StateSlice::exp_avg_sq, &p, 0, rows, optimizer_.exp_avg_sq() + p.grad_offset, saved});
  }
  return slices;
}

std::vector<float> DataParallel::full_parameters() {
  const float* values = store_.values().data<float>();
  return {values, values + store_.numel()};
}

void DataParallel::update_reduced_gradient(size_t p, const std::function<void(float*, int64_t)>& fn) {
  const Parameter& param = store_.params()[p];
  if (param.trainable()) fn(param.grad_data(), param.numel());
}

}  // namespace ndt
