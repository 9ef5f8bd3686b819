#include "parallel/zero.h"

#include "core/error.h"

#include <chrono>

namespace ndt {

ZeroDataParallel::ZeroDataParallel(ParameterStore& store, DeviceMesh& mesh, size_t bucket_bytes,
                                   const AdamWConfig& adamw)
    : store_(store),
      shard_comm_(mesh.axis("dp_shard")),
      replicate_comm_(mesh.axis("dp_replicate")),
      layout_(store, shard_comm_.rank(), shard_comm_.size()),
      buckets_(make_gradient_buckets(store, bucket_bytes)),
      optimizer_(store, layout_, adamw),
      in_flight_(buckets_.size()) {
  for (const GradientBucket& b : buckets_) slots_.push_back(layout_.arena_slots(b.first_param, b.end_param));
}

float* ZeroDataParallel::shard_segment(const GradientBucket& b) {
  return grad_shards_.data<float>() + layout_.shard(b.first_param).shard_offset;
}

void ZeroDataParallel::begin_backward(bool sync) {
  sync_ = sync;
  next_bucket_ = 0;
  if (sync && !grad_shards_.defined()) {
    grad_shards_ = Tensor::empty({layout_.arena_numel()}, DType::f32, MemTag::grads);
  }
}

void ZeroDataParallel::launch(size_t b) {
  const GradientBucket& bucket = buckets_[b];
  const int n = layout_.ranks();
  const ParamSlots& slots = slots_[b];
  const int64_t segment = layout_.segment_numel(slots);
  InFlight& f = in_flight_[b];
  f.staging = Tensor::empty({n * segment}, DType::f32, MemTag::comm);
  float* staging = f.staging.data<float>();
  for (int r = 0; r < n; ++r) layout_.pack(store_.grads().data<float>(), slots, r, staging + r * segment);
  f.work = shard_comm_.ireduce_scatter(staging, shard_segment(bucket), static_cast<size_t>(segment), DType::f32,
                                       ReduceOp::sum);
}

void ZeroDataParallel::grads_ready_from(int64_t arena_offset) {
  if (!sync_) return;
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= arena_offset) launch(next_bucket_++);
}

void ZeroDataParallel::poll() {
  for (size_t b = 0; b < next_bucket_; ++b) {
    InFlight& f = in_flight_[b];
    if (f.work && f.work->test()) f.work.reset(), f.staging = Tensor();
  }
}

void ZeroDataParallel::finish_backward() {
  if (!sync_) return;
  grads_ready_from(0);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    InFlight& f = in_flight_[b];
    if (f.work) f.work->wait();
    f.work.reset();
    f.staging = Tensor();
    if (replicate_comm_.size() > 1) {  // HSDP: the shards are replicated across dp_replicate
      replicate_comm_.all_reduce(shard_segment(buckets_[b]), static_cast<size_t>(layout_.segment_numel(slots_[b])),
                                 DType::f32, ReduceOp::sum);
    }
  }
  exposed_wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double ZeroDataParallel::grad_norm() {
  return finish_norm(sharded_grad_sum_of_squares(grad_shards_.data<float>(), layout_, shard_comm_, counted_in_norm()));
}

void ZeroDataParallel::step(float lr, float grad_scale) {
  optimizer_.step_whole_parameters(grad_shards_.data<float>(), lr, grad_scale);
  for (const ParamSlots& slots : slots_) {
    all_gather_updated_rows(layout_, slots, store_.values().data<float>(), shard_comm_);
  }
  grad_shards_ = Tensor();  // stage 1 keeps the full gradients between steps instead
}

std::vector<StateSlice> ZeroDataParallel::layout_state_slices() {
  // Whole parameters (replicated over dp): parameter i is written by dp_shard rank
  // i mod dp_shard of the first replica; moments: each rank its rows (replicated over
  // dp_replicate: the first replica writes them).
  const bool first_replica = replicate_comm_.rank() == 0;
  std::vector<StateSlice> slices;
  const auto& params = store_.params();
  for (size_t p = 0; p < params.size(); ++p) {
    const bool mine = static_cast<int>(p % static_cast<size_t>(shard_comm_.size())) == shard_comm_.rank();
    slices.push_back({StateSlice::value, &params[p], 0, params[p].local_shape[0], params[p].data(), first_replica && mine});
  }
  optimizer_.append_moment_slices(slices, first_replica);
  return slices;
}

std::vector<float> ZeroDataParallel::full_parameters() {
  const float* values = store_.values().data<float>();
  return {values, values + store_.numel()};
}

}  // namespace ndt
