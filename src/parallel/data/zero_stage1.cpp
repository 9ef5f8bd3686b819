#include "parallel/data/zero_stage1.h"

#include "core/error.h"
#include "core/timing.h"
#include "parallel/data/low_precision_comm.h"

#include <chrono>

namespace ndt {

ZeroStage1::ZeroStage1(ParameterStore& store, DeviceMesh& mesh, size_t bucket_bytes, const AdamWConfig& adamw,
                       DType reduce_dtype, offload::SwapSpace* swap)
    : store_(store),
      shard_comm_(mesh.axis(Axis::dp_shard_cp)),
      expert_shard_comm_(mesh.axis(Axis::edp_shard)),
      replicate_comm_(mesh.axis(Axis::dp_replicate)),
      layout_(store, ShardGroup{shard_comm_.rank(), shard_comm_.size()},
              ShardGroup{expert_shard_comm_.rank(), expert_shard_comm_.size()}, ShardLayout::Members::trainable),
      scheduler_(make_gradient_buckets(store, bucket_bytes, shard_comms()), [this](size_t b) { return launch(b); },
                 [this](size_t b) { completed(b); }),
      reduce_dtype_(reduce_dtype),
      optimizer_(store, layout_, adamw, swap) {
  for (const GradientBucket& b : scheduler_.buckets()) {
    slots_.push_back(layout_.arena_slots(b.first_param, b.end_param));
    grad_slots_.push_back(layout_.grad_arena_slots(b.first_param, b.end_param));
  }
  staging_.resize(slots_.size());
  reduced_.resize(slots_.size());
}

std::vector<Communicator*> ZeroStage1::shard_comms() const {
  std::vector<Communicator*> comms;
  for (const Parameter& p : store_.params()) {
    comms.push_back(p.sharded_on(Axis::ep) ? &expert_shard_comm_ : &shard_comm_);
  }
  return comms;
}

void ZeroStage1::completed(size_t b) {
  staging_[b] = Tensor();
  if (!reduced_[b].defined()) return;
  widen_received(reduced_[b], shard_segment(scheduler_.buckets()[b]), /*accumulate=*/false);
  reduced_[b] = Tensor();
}

float* ZeroStage1::shard_segment(const GradientBucket& b) {
  return grad_shards_.data<float>() + layout_.shard(b.first_param).shard_offset;
}

void ZeroStage1::begin_backward(bool sync) {
  scheduler_.begin(sync);
  if (sync && !grad_shards_.defined()) {
    grad_shards_ = Tensor::empty({layout_.arena_numel()}, DType::f32, MemTag::grads);
  }
}

WorkHandle ZeroStage1::launch(size_t b) {
  const ParamSlots& slots = grad_slots_[b];
  Communicator& comm = *scheduler_.buckets()[b].comm;
  const int n = comm.size();
  const int64_t segment = layout_.segment_numel(slots);
  staging_[b] = Tensor::empty({n * segment}, DType::f32, MemTag::comm);
  float* staging = staging_[b].data<float>();
  for (int r = 0; r < n; ++r) layout_.pack(store_.grads().data<float>(), slots, r, staging + r * segment);
  if (reduce_dtype_ == DType::f32) {
    return comm.ireduce_scatter(staging, shard_segment(scheduler_.buckets()[b]), static_cast<size_t>(segment),
                                       DType::f32, ReduceOp::sum);
  }
  staging_[b] = round_for_sending(reduce_dtype_, staging, n * segment);
  reduced_[b] = Tensor::empty({segment}, reduce_dtype_, MemTag::comm);
  return comm.ireduce_scatter(staging_[b].raw(), reduced_[b].raw(), static_cast<size_t>(segment),
                                     reduce_dtype_, ReduceOp::sum);
}

void ZeroStage1::after_backward(int unit) { scheduler_.grads_ready_from(store_.unit_grad_begin(unit)); }

void ZeroStage1::poll() { scheduler_.poll(); }

void ZeroStage1::finish_backward() {
  if (!scheduler_.syncing()) return;
  const auto t0 = std::chrono::steady_clock::now();
  scheduler_.wait_all();
  if (replicate_comm_.size() > 1) {  // HSDP: the shards are replicated across dp_replicate
    for (size_t b = 0; b < slots_.size(); ++b) {
      replicate_comm_.all_reduce(shard_segment(scheduler_.buckets()[b]),
                                 static_cast<size_t>(layout_.segment_numel(slots_[b])), DType::f32, ReduceOp::sum);
    }
  }
  exposed_wait_seconds_ += seconds_since(t0);
}

double ZeroStage1::grad_norm() {
  const ShardedSquares squares = sharded_grad_sum_of_squares(grad_shards_.data<float>(), layout_, shard_comm_,
                                                             expert_shard_comm_, counted_in_norm());
  return finish_norm(squares.dense, squares.experts);
}

void ZeroStage1::step(float lr, float grad_scale) {
  optimizer_.step_whole_parameters(grad_shards_.data<float>(), lr, grad_scale);
  for (size_t b = 0; b < slots_.size(); ++b) {
    all_gather_updated_rows(layout_, slots_[b], store_.values().data<float>(), *scheduler_.buckets()[b].comm);
  }
  grad_shards_ = Tensor();  // stage 1 keeps the full gradients between steps instead
}

std::vector<StateSlice> ZeroStage1::layout_state_slices() {
  // Whole parameters (replicated over dp; experts over edp): each is written by one rank
  // of its shard group (dp_shard; experts: edp_shard) in the first replica, chosen to
  // balance the bytes; moments: each rank its rows (replicated over dp_replicate: the
  // first replica writes them).
  const bool first_replica = replicate_comm_.rank() == 0;
  std::vector<StateSlice> slices;
  const auto& params = store_.params();
  const std::vector<char> writes = layout_.whole_parameter_writers(params);
  for (size_t p = 0; p < params.size(); ++p) {
    slices.push_back({StateSlice::value, &params[p], 0, params[p].local_shape[0], params[p].data(),
                      first_replica && writes[p]});
  }
  optimizer_.append_moment_slices(slices, first_replica);
  return slices;
}

std::vector<float> ZeroStage1::full_parameters() {
  const float* values = store_.values().data<float>();
  return {values, values + store_.numel()};
}

void ZeroStage1::update_reduced_gradient(size_t p, const std::function<void(float*, int64_t)>& fn) {
  if (!store_.params()[p].trainable()) return;
  const ParameterShard& s = layout_.shard(p);
  fn(grad_shards_.data<float>() + s.shard_offset, s.padded_numel());
}

}  // namespace ndt
