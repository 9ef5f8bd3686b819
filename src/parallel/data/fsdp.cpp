#include "parallel/data/fsdp.h"

#include "core/error.h"
#include "core/timing.h"
#include "kernels/kernels.h"
#include "model/matmul.h"
#include "parallel/data/low_precision_comm.h"

#include <algorithm>
#include <chrono>

namespace ndt {

FullyShardedDataParallel::FullyShardedDataParallel(ParameterStore& store, DeviceMesh& mesh, int stage,
                                                   const AdamWConfig& adamw, const std::vector<FsdpGroup>& groups,
                                                   bool prefetch, const std::vector<char>& local_units,
                                                   DType reduce_dtype, DType gather_dtype, offload::SwapSpace* swap)
    : store_(store),
      shard_comm_(mesh.axis(Axis::dp_shard_cp)),
      expert_shard_comm_(mesh.axis(Axis::edp_shard)),
      replicate_comm_(mesh.axis(Axis::dp_replicate)),
      stage_(stage),
      prefetch_(prefetch),
      reduce_dtype_(reduce_dtype),
      pipelined_(!local_units.empty()),
      layout_(store, ShardGroup{shard_comm_.rank(), shard_comm_.size()},
              ShardGroup{expert_shard_comm_.rank(), expert_shard_comm_.size()}),
      grad_layout_(store, ShardGroup{shard_comm_.rank(), shard_comm_.size()},
                   ShardGroup{expert_shard_comm_.rank(), expert_shard_comm_.size()}, ShardLayout::Members::trainable),
      optimizer_(store, grad_layout_, adamw, swap) {
  group_of_unit_.assign(static_cast<size_t>(store.num_units()), groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    NDT_CHECK(!groups[g].units.empty(), "FSDP group {} has no units", g);
    Group group;
    group.index = g;
    group.units = groups[g].units;
    group.first_unit = *std::min_element(groups[g].units.begin(), groups[g].units.end());
    if (!local_units.empty()) {  // a pipeline stage: the group's lowest unit on this rank
      group.first_unit = -1;
      for (int u : groups[g].units) {
        if (local_units[static_cast<size_t>(u)] && (group.first_unit < 0 || u < group.first_unit)) group.first_unit = u;
      }
    }
    group.reshard_after_forward = groups[g].reshard_after_forward;
    groups_.push_back(std::move(group));
    for (int u : groups[g].units) {
      NDT_CHECK(u >= 0 && u < store.num_units() && group_of_unit_[static_cast<size_t>(u)] == groups.size(),
                "FSDP groups: unit {} is out of range or in two groups", u);
      group_of_unit_[static_cast<size_t>(u)] = g;
    }
  }
  for (size_t g : group_of_unit_) NDT_CHECK(g < groups.size(), "FSDP groups: a unit of the model is in no group");
  auto& params = store.params();
  for (size_t p = 0; p < params.size(); ++p) {
    Group& group = group_of(params[p].unit());
    group.slots.params.push_back(p);
    group.slots.offsets.push_back(group.numel);
    group.arena.params.push_back(p);
    group.arena.offsets.push_back(params[p].arena_offset);
    group.numel += params[p].numel();
    if (!params[p].trainable()) continue;
    group.grad_slots.params.push_back(p);
    group.grad_slots.offsets.push_back(group.grad_numel);
    group.grad_numel += params[p].numel();
  }
  for (Group& g : groups_) plan_collectives(g, gather_dtype);
  NDT_CHECK(stage == 2 || stage == 3, "parallel.zero_stage = {}: this class implements stages 2 and 3", stage);
  store.release_grads();  // gradients live in per-unit buffers during backward
  if (swap && swap->options().params) {
    offload_shards(store, *swap);
    return;
  }
  grad_shards_ = Tensor::zeros({grad_layout_.arena_numel()}, DType::f32, MemTag::grads);
  if (!shards_parameters()) {
    NDT_CHECK(store.values().defined(), "ZeRO stage 2 keeps whole parameters: build the model materialised");
    return;
  }
  initialise_shards(store);
}

void FullyShardedDataParallel::plan_collectives(Group& g, DType gather_dtype) {
  const auto& params = store_.params();
  const std::vector<ParamSlots> grad_by_group = grad_layout_.by_group(g.grad_slots);
  for (int sg = 0; sg < static_cast<int>(grad_by_group.size()); ++sg) {
    const ParamSlots& slots = grad_by_group[static_cast<size_t>(sg)];
    if (slots.params.empty()) continue;
    Group::ReducePart reduce;
    reduce.slots = slots;
    reduce.segment = grad_layout_.segment_numel(slots);
    reduce.shard_group = sg;
    g.reduces.push_back(std::move(reduce));
  }
  const std::vector<ParamSlots> by_group = layout_.by_group(g.slots);
  for (int sg = 0; sg < static_cast<int>(by_group.size()); ++sg) {
    const ParamSlots& slots = by_group[static_cast<size_t>(sg)];
    if (slots.params.empty()) continue;
    // Weights only matmuls read travel in the gather dtype (their compute copy is all
    // the model reads of them); the rest in fp32.
    Group::GatherPart wide, low;
    low.dtype = gather_dtype;
    for (size_t i = 0; i < slots.params.size(); ++i) {
      const size_t p = slots.params[i];
      Group::GatherPart& part = gather_dtype != DType::f32 && used_only_in_matmuls(params[p].spec) ? low : wide;
      part.slots.params.push_back(p);
      part.slots.offsets.push_back(slots.offsets[i]);
    }
    for (Group::GatherPart* part : {&wide, &low}) {
      if (part->slots.params.empty()) continue;
      part->segment = layout_.segment_numel(part->slots);
      part->shard_group = sg;
      g.parts.push_back(std::move(*part));
    }
  }
}

void FullyShardedDataParallel::offload_shards(ParameterStore& store, offload::SwapSpace& swap) {
  NDT_CHECK(stage_ == 3, "offload.params = \"disk\" needs parallel.zero_stage = 3 (FSDP), not {}", stage_);
  NDT_CHECK(optimizer_.offloaded(), "offload.params = \"disk\" needs offload.optimizer = \"disk\"");
  NDT_CHECK(!store.has_frozen(),
            "offload.params = \"disk\" with frozen parameters (train.freeze, lora) is not supported: the "
            "parameter and gradient swap files share one layout");
  NDT_CHECK(replicate_comm_.size() == 1,
            "offload.params = \"disk\" with parallel.dp_replicate = {} (HSDP) is not supported: the gradient shards "
            "on disk would have to be all-reduced over the replicas",
            replicate_comm_.size());
  std::vector<std::vector<int>> units;
  for (const Group& g : groups_) units.push_back(g.units);
  offloaded_ = std::make_unique<OffloadedShards>(swap, optimizer_.offloaded()->layout(), units);
  prefetch_units_ = swap.options().prefetch;
  initialise_offloaded_shards(store);
}

void FullyShardedDataParallel::initialise_shards(ParameterStore& store) {
  // This rank's shards are the master copy. Each is initialised from its logical
  // position (the same values the whole tensor would hold), or, if the store holds
  // whole parameters, copied from them, which are then freed.
  auto& params = store.params();
  param_shards_ = Tensor::zeros({layout_.arena_numel()}, DType::f32, MemTag::params);
  if (store.values().defined()) {
    for (size_t p = 0; p < params.size(); ++p) {  // each at its shard's offset, as its group's rank
      const ParameterShard& s = layout_.shard(p);
      layout_.pack(store.values().data<float>(), layout_.arena_slots(p, p + 1), layout_.rank(s.group),
                   param_shards_.data<float>() + s.shard_offset);
    }
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

void FullyShardedDataParallel::initialise_offloaded_shards(ParameterStore& store) {
  // As initialise_shards, unit by unit into the parameter swap file: the same values.
  auto& params = store.params();
  const offload::SwapLayout& swap = offloaded_->layout();
  offloaded_->initialise([&](int unit, float* values) {
    const int64_t base = swap.region(unit).arena_begin;
    for (size_t p = 0; p < params.size(); ++p) {
      if (params[p].unit() != unit) continue;
      const ParameterShard& s = layout_.shard(p);
      float* out = values + (s.shard_offset - base);
      if (store.values().defined()) {
        layout_.pack(store.values().data<float>(), layout_.arena_slots(p, p + 1), layout_.rank(s.group), out);
      } else if (s.owned_numel() > 0) {
        Shape block = params[p].local_shape, offset = params[p].local_offset;
        if (!block.empty()) block[0] = s.end_row - s.begin_row, offset[0] += s.begin_row;
        init_parameter_block(out, params[p].spec, block, offset, store.seed());
      }
    }
  });
  if (store.values().defined()) store.release_values();
}

const float* FullyShardedDataParallel::param_shard(Group& g, size_t p) {
  const int64_t offset = layout_.shard(p).shard_offset;
  if (!offloaded_) return param_shards_.data<float>() + offset;
  // A parameter another pipeline stage holds has no elements here, so no place on disk.
  return layout_.shard(p).padded_numel() == 0 ? nullptr : offloaded_->shard(g.index, offset);
}

float* FullyShardedDataParallel::grad_shard(Group& g, size_t p) {
  const int64_t offset = grad_layout_.shard(p).shard_offset;
  if (!offloaded_) return grad_shards_.data<float>() + offset;
  return grad_layout_.shard(p).padded_numel() == 0 ? nullptr : offloaded_->grad(g.index, offset);
}

void FullyShardedDataParallel::read_ahead(int unit, int direction) {
  if (!offloaded_) return;
  for (int k = 0; k <= prefetch_units_; ++k) {
    const int u = unit + direction * k;
    if (u < 0 || u >= store_.num_units()) break;
    Group& g = group_of(u);
    if (!g.values.defined() && !g.gathering()) offloaded_->read_ahead(g.index);
  }
}

void FullyShardedDataParallel::point_values(Group& g, bool gathered) {
  for (size_t i = 0; i < g.slots.params.size(); ++i) {
    Parameter& p = store_.params()[g.slots.params[i]];
    const int64_t begin = g.slots.offsets[i], end = begin + p.numel();
    p.value = gathered ? g.values.slice(begin, end).view(p.local_shape) : Tensor();
    p.compute = gathered && g.compute.defined() ? g.compute.slice(begin, end).view(p.local_shape) : Tensor();
  }
}

void FullyShardedDataParallel::point_grads(Group& g, bool allocated) {
  for (size_t i = 0; i < g.grad_slots.params.size(); ++i) {
    Parameter& p = store_.params()[g.grad_slots.params[i]];
    const int64_t begin = g.grad_slots.offsets[i];
    p.grad = allocated ? g.grads.slice(begin, begin + p.numel()).view(p.local_shape) : Tensor();
  }
}

bool FullyShardedDataParallel::Group::gathering() const {
  for (const GatherPart& part : parts) {
    if (part.work) return true;
  }
  return false;
}

void FullyShardedDataParallel::need_gather(Group& g) {
  if (!g.values.defined()) ++(g.gathering() ? gathers_prefetched_ : gathers_on_demand_);
  start_gather(g);
}

void FullyShardedDataParallel::start_gather(Group& g) {
  if (g.values.defined() || g.gathering()) return;
  if (offloaded_) offloaded_->wait(g.index);  // its shards, read from disk
  for (Group::GatherPart& part : g.parts) {
    Communicator& comm = comm_of(part.shard_group);
    Tensor own = Tensor::empty({part.segment}, DType::f32, MemTag::comm);
    float* send = own.data<float>();
    for (size_t p : part.slots.params) {  // own shards, already padded, in group order
      kernels::copy(send, param_shard(g, p), layout_.shard(p).padded_numel());
      send += layout_.shard(p).padded_numel();
    }
    part.send = part.dtype == DType::f32 ? own : round_for_sending(part.dtype, own.data<float>(), part.segment);
    part.recv = Tensor::empty({comm.size() * part.segment}, part.dtype, MemTag::comm);
    part.work = comm.iall_gather(part.send.raw(), part.recv.raw(), static_cast<size_t>(part.segment), part.dtype);
  }
  if (offloaded_) offloaded_->release(g.index);  // packed: the send buffers hold them now
}

void FullyShardedDataParallel::finish_gather(Group& g) {
  if (g.values.defined()) return;
  start_gather(g);
  const auto t0 = std::chrono::steady_clock::now();
  for (Group::GatherPart& part : g.parts) part.work->wait(), part.work.reset();
  gather_wait_seconds_ += seconds_since(t0);
  g.values = Tensor::empty({g.numel}, DType::f32, MemTag::params);
  for (Group::GatherPart& part : g.parts) {
    if (part.dtype == DType::f32) {
      layout_.unpack_all(part.recv.data<float>(), part.slots, g.values.data<float>());
    } else {  // widened (exactly: the compute copy below recasts the same bits)
      Tensor wide = Tensor::empty({part.recv.numel()}, DType::f32, MemTag::comm);
      widen_received(part.recv, wide.data<float>(), /*accumulate=*/false);
      layout_.unpack_all(wide.data<float>(), part.slots, g.values.data<float>());
    }
    part.send = Tensor();
    part.recv = Tensor();
  }
  const DType compute = store_.compute_dtype();
  if (compute != DType::f32) {  // the group's compute copy, cast once per gather
    g.compute = Tensor::empty({g.numel}, compute, MemTag::params);
    kernels::cast_to_lowp(compute, g.values.data<float>(), static_cast<uint16_t*>(g.compute.raw()), g.numel);
  }
  point_values(g, true);
}

void FullyShardedDataParallel::release(Group& g) {
  for (Group::GatherPart& part : g.parts) {
    if (part.work) part.work->wait(), part.work.reset();  // a prefetch nobody used
    part.send = Tensor();
    part.recv = Tensor();
  }
  g.values = Tensor();
  g.compute = Tensor();
  point_values(g, false);
  if (offloaded_) offloaded_->release(g.index);  // a read ahead nobody used
}

void FullyShardedDataParallel::before_forward(int unit) {
  if (!shards_parameters()) return;
  Group& g = group_of(unit);
  read_ahead(unit, +1);
  need_gather(g);
  // Prefetch the next unit's group while this one computes.
  if (prefetch_ && unit + 1 < store_.num_units()) start_gather(group_of(unit + 1));
  finish_gather(g);
}

void FullyShardedDataParallel::after_forward(int unit) {
  Group& g = group_of(unit);
  if (shards_parameters() && g.reshard_after_forward) release(g);
}

void FullyShardedDataParallel::after_forward_only() {
  if (!shards_parameters()) return;
  for (Group& g : groups_) release(g);  // nothing stays gathered
}

void FullyShardedDataParallel::before_backward(int unit) {
  Group& g = group_of(unit);
  // Backward visits the units from the last: prefetch in that order.
  if (shards_parameters()) {
    read_ahead(unit, -1);
    need_gather(g);
    if (prefetch_ && unit > 0) start_gather(group_of(unit - 1));
    finish_gather(g);
  }
  if (!g.grads.defined()) {  // the group's first unit in backward order
    g.grads = Tensor::zeros({g.grad_numel}, DType::f32, MemTag::grads);
    point_grads(g, true);
  }
}

void FullyShardedDataParallel::after_backward(int unit) {
  Group& g = group_of(unit);
  if (unit != g.first_unit) return;  // the group's gradients are final after its first unit
  // A pipeline stage keeps its groups' gradients whole over the step's micro-batches
  // (whose backward passes interleave, zero-bubble even splits them) and
  // reduce-scatters them in finish_backward.
  if (!pipelined_) start_reduce(g);
  if (!shards_parameters()) return;
  release(g);
  if (unit == 0) {  // the end of backward: nothing stays gathered
    for (Group& other : groups_) release(other);
  }
}

void FullyShardedDataParallel::start_reduce(Group& g) {
  for (Group::ReducePart& part : g.reduces) {
    Communicator& comm = comm_of(part.shard_group);
    const int n = comm.size();
    part.send = Tensor::empty({n * part.segment}, DType::f32, MemTag::comm);
    part.recv = Tensor::empty({part.segment}, DType::f32, MemTag::comm);
    for (int r = 0; r < n; ++r) {
      grad_layout_.pack(g.grads.data<float>(), part.slots, r, part.send.data<float>() + r * part.segment);
    }
    if (reduce_dtype_ == DType::f32) {
      part.work = comm.ireduce_scatter(part.send.data<float>(), part.recv.data<float>(),
                                       static_cast<size_t>(part.segment), DType::f32, ReduceOp::sum);
    } else {
      part.send_low = round_for_sending(reduce_dtype_, part.send.data<float>(), n * part.segment);
      part.send = Tensor();
      part.recv_low = Tensor::empty({part.segment}, reduce_dtype_, MemTag::comm);
      part.work = comm.ireduce_scatter(part.send_low.raw(), part.recv_low.raw(), static_cast<size_t>(part.segment),
                                       reduce_dtype_, ReduceOp::sum);
    }
  }
  g.grads = Tensor();
  point_grads(g, false);
  g.reducing = offloaded_ != nullptr;
}

void FullyShardedDataParallel::poll() {
  for (Group& g : groups_) {
    for (Group::GatherPart& part : g.parts) {
      if (part.work) part.work->test();
    }
    // A finished reduce-scatter is folded into the shards at once, freeing its buffers.
    for (Group::ReducePart& part : g.reduces) {
      if (part.work && part.work->test()) finish_reduce(g, part);
    }
  }
}

void FullyShardedDataParallel::finish_reduce(Group& g) {
  for (Group::ReducePart& part : g.reduces) finish_reduce(g, part);
}

void FullyShardedDataParallel::finish_reduce(Group& g, Group::ReducePart& part) {
  if (!part.work) return;
  part.work->wait();
  part.work.reset();
  if (part.recv_low.defined()) {
    widen_received(part.recv_low, part.recv.data<float>(), /*accumulate=*/false);
    part.send_low = Tensor();
    part.recv_low = Tensor();
  }
  // Sum into the gradient shards (micro-steps accumulate here).
  float* shard = part.recv.data<float>();
  for (size_t p : part.slots.params) {
    kernels::add_inplace(grad_shard(g, p), shard, grad_layout_.shard(p).padded_numel());
    shard += grad_layout_.shard(p).padded_numel();
  }
  part.send = Tensor();
  part.recv = Tensor();
  // Parameter offload: once every part is in, the group's gradient shards go to disk.
  if (!g.reducing || std::any_of(g.reduces.begin(), g.reduces.end(), [](const auto& r) { return r.work != nullptr; })) {
    return;
  }
  offloaded_->write_grads(g.index);
  g.reducing = false;
}

void FullyShardedDataParallel::zero_grads() {
  if (offloaded_) return offloaded_->begin_step();
  const kernels::ProfileScope scope(kernels::OpClass::elementwise);
  grad_shards_.zero_();
}

void FullyShardedDataParallel::begin_backward(bool sync) { sync_ = sync; }

void FullyShardedDataParallel::finish_backward() {
  const auto t0 = std::chrono::steady_clock::now();
  if (pipelined_) {
    for (Group& g : groups_) {
      if (g.grads.defined()) start_reduce(g);
    }
  }
  for (Group& g : groups_) finish_reduce(g);
  if (offloaded_) offloaded_->finish_writes();  // the gradient file is this step's before the norm reads it
  if (sync_ && replicate_comm_.size() > 1) {  // HSDP: shards are replicated over dp_replicate
    replicate_comm_.all_reduce(grad_shards_.data<float>(), static_cast<size_t>(grad_layout_.arena_numel()), DType::f32,
                               ReduceOp::sum);
  }
  exposed_wait_seconds_ += seconds_since(t0);
}

double FullyShardedDataParallel::grad_norm() {
  const ShardedSquares squares =
      offloaded_ ? streamed_grad_sum_of_squares(offloaded_->grads(), offloaded_->layout(), prefetch_units_, grad_layout_,
                                                shard_comm_, expert_shard_comm_, counted_in_norm())
                 : sharded_grad_sum_of_squares(grad_shards_.data<float>(), grad_layout_, shard_comm_, expert_shard_comm_,
                                               counted_in_norm());
  return finish_norm(squares.dense, squares.experts);
}

void FullyShardedDataParallel::step(float lr, float grad_scale) {
  if (offloaded_) return optimizer_.step_streamed(offloaded_->params(), offloaded_->grads(), lr, grad_scale);
  if (shards_parameters()) {
    optimizer_.step(grad_shards_.data<float>(),
                    [&](size_t p) { return param_shards_.data<float>() + layout_.shard(p).shard_offset; }, lr,
                    grad_scale);
    return;
  }
  // Stage 2: update the owned rows of the whole parameters, then share them.
  optimizer_.step_whole_parameters(grad_shards_.data<float>(), lr, grad_scale);
  for (const Group& g : groups_) {  // the frozen parameters have no rows in grad_layout_: nothing to share
    const std::vector<ParamSlots> by_group = grad_layout_.by_group(g.arena);
    for (int sg = 0; sg < static_cast<int>(by_group.size()); ++sg) {
      const ParamSlots& slots = by_group[static_cast<size_t>(sg)];
      if (grad_layout_.segment_numel(slots) > 0) {
        all_gather_updated_rows(grad_layout_, slots, store_.values().data<float>(), comm_of(sg));
      }
    }
  }
}

std::vector<StateSlice> FullyShardedDataParallel::layout_state_slices() {
  // Stage 3: each rank its rows of parameters and moments; stage 2: each whole
  // parameter written by one rank of its shard group (dp_shard; experts: edp_shard),
  // chosen to balance the bytes, moments by rows. Replicas over dp_replicate hold
  // copies (the first one writes).
  const bool first_replica = replicate_comm_.rank() == 0;
  std::vector<StateSlice> slices;
  const auto& params = store_.params();
  const std::vector<char> writes = layout_.whole_parameter_writers(params);
  for (size_t p = 0; p < params.size(); ++p) {
    const ParameterShard& s = layout_.shard(p);
    if (!shards_parameters()) {
      slices.push_back({StateSlice::value, &params[p], 0, params[p].local_shape[0], params[p].data(),
                        first_replica && writes[p]});
    } else if (s.owned_numel() > 0 && offloaded_) {
      slices.push_back({StateSlice::value, &params[p], s.begin_row, s.end_row, nullptr, first_replica,
                        &offloaded_->params(), offloaded_->layout().file_element(s.shard_offset)});
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
  // Per shard group: this rank's shards of its parameters, all-gathered and unpacked.
  std::vector<float> full(static_cast<size_t>(store_.numel()));
  std::vector<float> offloaded;  // parameter offload: this rank's shards, read from disk
  if (offloaded_) {
    offloaded.resize(static_cast<size_t>(layout_.arena_numel()));
    const offload::SwapLayout& swap = offloaded_->layout();
    for (int u = 0; u < swap.units(); ++u) {
      const offload::SwapRegion& r = swap.region(u);
      if (r.arena_end == r.arena_begin) continue;  // a unit of another pipeline stage
      offloaded_->params().read_elements(swap.file_element(r.arena_begin), r.arena_end - r.arena_begin,
                                         offloaded.data() + r.arena_begin);
    }
  }
  const float* shards = offloaded_ ? offloaded.data() : param_shards_.data<float>();
  const std::vector<ParamSlots> by_group = layout_.by_group(layout_.arena_slots(0, store_.params().size()));
  for (int sg = 0; sg < static_cast<int>(by_group.size()); ++sg) {
    const ParamSlots& slots = by_group[static_cast<size_t>(sg)];
    if (slots.params.empty()) continue;
    Communicator& comm = comm_of(sg);
    const int64_t segment = layout_.segment_numel(slots);
    std::vector<float> mine(static_cast<size_t>(segment)), all(static_cast<size_t>(comm.size() * segment));
    float* out = mine.data();
    for (size_t p : slots.params) {
      const ParameterShard& s = layout_.shard(p);
      kernels::copy(out, shards + s.shard_offset, s.padded_numel());
      out += s.padded_numel();
    }
    comm.all_gather(mine.data(), all.data(), static_cast<size_t>(segment), DType::f32);
    layout_.unpack_all(all.data(), slots, full.data());
  }
  return full;
}

void FullyShardedDataParallel::update_reduced_gradient(size_t p, const std::function<void(float*, int64_t)>& fn) {
  if (!store_.params()[p].trainable()) return;
  const ParameterShard& s = grad_layout_.shard(p);
  if (!offloaded_) return fn(grad_shards_.data<float>() + s.shard_offset, s.padded_numel());
  std::vector<float> grad(static_cast<size_t>(s.padded_numel()));
  const int64_t at = offloaded_->layout().file_element(s.shard_offset);
  offloaded_->grads().read_elements(at, s.padded_numel(), grad.data());
  fn(grad.data(), s.padded_numel());
  offloaded_->grads().write_elements(at, s.padded_numel(), grad.data());
}

}  // namespace ndt
