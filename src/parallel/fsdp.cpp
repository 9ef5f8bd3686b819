#include "parallel/fsdp.h"

#include "core/error.h"
#include "core/timing.h"
#include "kernels/cpu/elementwise.h"

#include <chrono>
#include <cstring>
#include <string>

namespace ndt {

namespace {

// "blocks.<l>.<rest>" belongs to unit 1 + l; everything else to the root, unit 0.
size_t unit_of(const std::string& name) {
  if (name.rfind("blocks.", 0) != 0) return 0;
  return 1 + std::stoul(name.substr(7, name.find('.', 7) - 7));
}

}  // namespace

FullyShardedDataParallel::FullyShardedDataParallel(ParameterStore& store, DeviceMesh& mesh, int stage,
                                                   const AdamWConfig& adamw, bool reshard_after_forward, bool prefetch)
    : store_(store),
      shard_comm_(mesh.axis("dp_shard")),
      replicate_comm_(mesh.axis("dp_replicate")),
      stage_(stage),
      reshard_after_forward_(reshard_after_forward),
      prefetch_(prefetch),
      layout_(store, shard_comm_.rank(), shard_comm_.size()),
      optimizer_(store, layout_, adamw) {
  auto& params = store.params();
  for (size_t p = 0; p < params.size(); ++p) {
    const size_t u = unit_of(params[p].name());
    if (u >= units_.size()) units_.resize(u + 1);
    Unit& unit = units_[u];
    unit.slots.params.push_back(p);
    unit.slots.offsets.push_back(unit.numel);
    unit.arena.params.push_back(p);
    unit.arena.offsets.push_back(params[p].arena_offset);
    unit.numel += params[p].numel();
    // FSDP shards the tensor-parallel block (if any) further along its dim 0.
    if (shards_parameters()) params[p].placements.push_back(Placement{"dp_shard", Placement::Kind::shard, 0});
  }
  for (Unit& u : units_) u.segment = layout_.segment_numel(u.slots);
  NDT_CHECK(stage == 2 || stage == 3, "parallel.zero_stage = {}: this class implements stages 2 and 3", stage);
  store.release_grads();  // gradients live in per-unit buffers during backward
  grad_shards_ = Tensor::zeros({layout_.arena_numel()}, DType::f32, MemTag::grads);
  if (!shards_parameters()) {
    NDT_CHECK(store.values().defined(), "ZeRO stage 2 keeps whole parameters: build the model materialised");
    return;
  }

  // This rank's shards are the master copy. Each is initialised from its logical
  // position (the same values the whole tensor would hold), or, if the store holds
  // whole parameters, copied from them, which are then freed.
  param_shards_ = Tensor::zeros({layout_.arena_numel()}, DType::f32, MemTag::params);
  if (store.values().defined()) {
    layout_.pack(store.values().data<float>(), layout_.arena_slots(0, params.size()), layout_.rank(),
                 param_shards_.data<float>());
    store.release_values();
  } else {
    for (size_t p = 0; p < params.size(); ++p) {
      const ParameterShard& s = layout_.shard(p);
      if (s.owned_numel() == 0) continue;
      Shape block = params[p].local_shape, offset = params[p].local_offset;
      if (!block.empty()) block[0] = s.end_row - s.begin_row, offset[0] += s.begin_row;
      init_parameter_block(param_shards_.data<float>() + s.shard_offset, params[p].spec, block, offset, store.seed());
    }
  }
}

void FullyShardedDataParallel::point_values(Unit& u, bool gathered) {
  for (size_t i = 0; i < u.slots.params.size(); ++i) {
    Parameter& p = store_.params()[u.slots.params[i]];
    p.value = gathered ? u.values.slice(u.slots.offsets[i], u.slots.offsets[i] + p.numel()).view(p.local_shape)
                       : Tensor();
  }
}

void FullyShardedDataParallel::point_grads(Unit& u, bool allocated) {
  for (size_t i = 0; i < u.slots.params.size(); ++i) {
    Parameter& p = store_.params()[u.slots.params[i]];
    p.grad = allocated ? u.grads.slice(u.slots.offsets[i], u.slots.offsets[i] + p.numel()).view(p.local_shape)
                       : Tensor();
  }
}

void FullyShardedDataParallel::start_gather(Unit& u) {
  if (u.values.defined() || u.gather) return;
  const int n = layout_.ranks();
  u.gather_send = Tensor::empty({u.segment}, DType::f32, MemTag::comm);
  u.gather_recv = Tensor::empty({n * u.segment}, DType::f32, MemTag::comm);
  float* send = u.gather_send.data<float>();
  for (size_t p : u.slots.params) {  // own shards, already padded, in unit order
    const ParameterShard& s = layout_.shard(p);
    std::memcpy(send, param_shards_.data<float>() + s.shard_offset, static_cast<size_t>(s.padded_numel()) * 4);
    send += s.padded_numel();
  }
  u.gather = shard_comm_.iall_gather(u.gather_send.data<float>(), u.gather_recv.data<float>(),
                                     static_cast<size_t>(u.segment), DType::f32);
}

void FullyShardedDataParallel::finish_gather(Unit& u) {
  if (u.values.defined()) return;
  start_gather(u);
  const auto t0 = std::chrono::steady_clock::now();
  u.gather->wait();
  gather_wait_seconds_ += seconds_since(t0);
  u.gather.reset();
  u.values = Tensor::empty({u.numel}, DType::f32, MemTag::params);
  layout_.unpack_all(u.gather_recv.data<float>(), u.slots, u.values.data<float>());
  u.gather_send = Tensor();
  u.gather_recv = Tensor();
  point_values(u, true);
}

void FullyShardedDataParallel::release(Unit& u) {
  if (u.gather) u.gather->wait(), u.gather.reset();  // a prefetch nobody used
  u.gather_send = Tensor();
  u.gather_recv = Tensor();
  u.values = Tensor();
  point_values(u, false);
}

void FullyShardedDataParallel::before_forward(int hook_unit) {
  if (!shards_parameters()) return;
  Unit& u = unit(hook_unit);
  start_gather(u);
  // Prefetch the next block (after the root: block 0) while this unit computes.
  if (prefetch_ && hook_unit + 2 < static_cast<int>(units_.size())) start_gather(unit(hook_unit + 1));
  finish_gather(u);
}

void FullyShardedDataParallel::after_forward(int hook_unit) {
  if (!shards_parameters()) return;
  if (hook_unit == kRootUnit) {  // end of a forward-only pass: nothing stays gathered
    for (Unit& u : units_) release(u);
  } else if (reshard_after_forward_) {
    release(unit(hook_unit));
  }
}

void FullyShardedDataParallel::before_backward(int hook_unit) {
  Unit& u = unit(hook_unit);
  // Backward visits the root first, then blocks from the last: prefetch in that order.
  const int next = hook_unit == kRootUnit ? static_cast<int>(units_.size()) - 2 : hook_unit - 1;
  if (shards_parameters()) {
    start_gather(u);
    if (prefetch_ && next >= 0) start_gather(unit(next));
    finish_gather(u);
  }
  u.grads = Tensor::zeros({u.numel}, DType::f32, MemTag::grads);
  point_grads(u, true);
}

void FullyShardedDataParallel::after_backward(int hook_unit) {
  Unit& u = unit(hook_unit);
  const int n = layout_.ranks();
  u.reduce_send = Tensor::empty({n * u.segment}, DType::f32, MemTag::comm);
  u.reduce_recv = Tensor::empty({u.segment}, DType::f32, MemTag::comm);
  for (int r = 0; r < n; ++r) {
    layout_.pack(u.grads.data<float>(), u.slots, r, u.reduce_send.data<float>() + r * u.segment);
  }
  u.reduce = shard_comm_.ireduce_scatter(u.reduce_send.data<float>(), u.reduce_recv.data<float>(),
                                         static_cast<size_t>(u.segment), DType::f32, ReduceOp::sum);
  u.grads = Tensor();
  point_grads(u, false);
  if (!shards_parameters()) return;
  release(u);
  if (hook_unit == kRootUnit) {  // the end of backward: every block was released already
    for (Unit& other : units_) release(other);
  }
}

void FullyShardedDataParallel::poll() {
  for (Unit& u : units_) {
    if (u.gather) u.gather->test();
    // A finished reduce-scatter is folded into the shards at once, freeing its buffers.
    if (u.reduce && u.reduce->test()) finish_reduce(u);
  }
}

void FullyShardedDataParallel::finish_reduce(Unit& u) {
  if (!u.reduce) return;
  u.reduce->wait();
  u.reduce.reset();
  // Sum into the gradient shards (micro-steps accumulate here).
  float* shard = u.reduce_recv.data<float>();
  for (size_t p : u.slots.params) {
    const ParameterShard& s = layout_.shard(p);
    cpu::add_inplace(grad_shards_.data<float>() + s.shard_offset, shard, s.padded_numel());
    shard += s.padded_numel();
  }
  u.reduce_send = Tensor();
  u.reduce_recv = Tensor();
}

void FullyShardedDataParallel::zero_grads() { grad_shards_.zero_(); }

void FullyShardedDataParallel::begin_backward(bool sync) { sync_ = sync; }

void FullyShardedDataParallel::finish_backward() {
  const auto t0 = std::chrono::steady_clock::now();
  for (Unit& u : units_) finish_reduce(u);
  if (sync_ && replicate_comm_.size() > 1) {  // HSDP: shards are replicated over dp_replicate
    replicate_comm_.all_reduce(grad_shards_.data<float>(), static_cast<size_t>(layout_.arena_numel()), DType::f32,
                               ReduceOp::sum);
  }
  exposed_wait_seconds_ += seconds_since(t0);
}

double FullyShardedDataParallel::grad_norm() {
  return finish_norm(sharded_grad_sum_of_squares(grad_shards_.data<float>(), layout_, shard_comm_, counted_in_norm()));
}

void FullyShardedDataParallel::step(float lr, float grad_scale) {
  if (shards_parameters()) {
    optimizer_.step(grad_shards_.data<float>(),
                    [&](size_t p) { return param_shards_.data<float>() + layout_.shard(p).shard_offset; }, lr,
                    grad_scale);
    return;
  }
  // Stage 2: update the owned rows of the whole parameters, then share them.
  optimizer_.step_whole_parameters(grad_shards_.data<float>(), lr, grad_scale);
  for (const Unit& u : units_) all_gather_updated_rows(layout_, u.arena, store_.values().data<float>(), shard_comm_);
}

std::vector<StateSlice> FullyShardedDataParallel::layout_state_slices() {
  // Stage 3: each rank its rows of parameters and moments; stage 2: whole parameter p
  // written by dp_shard rank p mod dp_shard, moments by rows. Replicas over
  // dp_replicate hold copies (the first one writes).
  const bool first_replica = replicate_comm_.rank() == 0;
  std::vector<StateSlice> slices;
  const auto& params = store_.params();
  for (size_t p = 0; p < params.size(); ++p) {
    const ParameterShard& s = layout_.shard(p);
    if (!shards_parameters()) {
      const bool mine = static_cast<int>(p % static_cast<size_t>(shard_comm_.size())) == shard_comm_.rank();
      slices.push_back({StateSlice::value, &params[p], 0, params[p].local_shape[0], params[p].data(),
                        first_replica && mine});
    } else if (s.owned_numel() > 0) {
      slices.push_back({StateSlice::value, &params[p], s.begin_row, s.end_row,
                        param_shards_.data<float>() + s.shard_offset, first_replica});
    }
  }
  optimizer_.append_moment_slices(slices, first_replica);
  return slices;
}

std::vector<float> FullyShardedDataParallel::full_parameters() {
  if (!shards_parameters()) {
    const float* values = store_.values().data<float>();
    return {values, values + store_.numel()};
  }
  const int n = layout_.ranks();
  std::vector<float> all(static_cast<size_t>(n * layout_.arena_numel())), full(static_cast<size_t>(store_.numel()));
  shard_comm_.all_gather(param_shards_.data<float>(), all.data(), static_cast<size_t>(layout_.arena_numel()),
                         DType::f32);
  layout_.unpack_all(all.data(), layout_.arena_slots(0, store_.params().size()), full.data());
  return full;
}

}  // namespace ndt
