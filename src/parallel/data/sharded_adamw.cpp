#include "parallel/data/sharded_adamw.h"

#include "kernels/kernels.h"
#include "offload/chunk_stream.h"
#include "optim/clip.h"

#include <cmath>

namespace ndt {

ShardedAdamW::ShardedAdamW(const ParameterStore& store, const ShardLayout& layout, const AdamWConfig& config,
                           offload::SwapSpace* swap)
    : store_(store), layout_(layout), config_(config) {
  const auto& params = store.params();
  for (size_t p = 0; p < params.size(); ++p) {
    const ParameterShard& s = layout.shard(p);
    if (s.owned_numel() == 0) continue;
    segments_.push_back({p, s.shard_offset, s.shard_offset + s.owned_numel(),
                         params[p].spec.weight_decay ? config.weight_decay : 0.0f});
  }
  if (swap) {
    offloaded_ = std::make_unique<OffloadedMoments>(
        *swap, offload::SwapLayout(layout.unit_ranges(params, store.num_units()), swap->options().chunk_elements()));
  } else {
    m_ = Tensor::zeros({layout.arena_numel()}, DType::f32, MemTag::optimizer);
    v_ = Tensor::zeros({layout.arena_numel()}, DType::f32, MemTag::optimizer);
  }
}

kernels::AdamWStep ShardedAdamW::constants(float lr, float grad_scale) const {
  return kernels::AdamWStep{lr, config_.beta1, config_.beta2, config_.eps, 0.0f, grad_scale, t_};
}

void ShardedAdamW::step(const float* grad_shards, const std::function<float*(size_t p)>& owned_rows, float lr,
                        float grad_scale) {
  ++t_;
  if (offloaded_) {
    offloaded_->step(segments_, {owned_rows, grad_shards, nullptr, nullptr}, constants(lr, grad_scale));
    return;
  }
  const auto& params = store_.params();
  for (size_t p = 0; p < params.size(); ++p) {
    const ParameterShard& s = layout_.shard(p);
    if (s.owned_numel() == 0) continue;  // more ranks than rows: this rank owns none
    const kernels::AdamWStep step{lr, config_.beta1, config_.beta2, config_.eps,
                              params[p].spec.weight_decay ? config_.weight_decay : 0.0f, grad_scale, t_};
    kernels::adamw_update(owned_rows(p), grad_shards + s.shard_offset, m_.data<float>() + s.shard_offset,
                      v_.data<float>() + s.shard_offset, s.owned_numel(), step);
  }
}

void ShardedAdamW::step_streamed(offload::SwapFile& params, offload::SwapFile& grads, float lr, float grad_scale) {
  NDT_CHECK(offloaded_ != nullptr, "offload.params = \"disk\" needs offload.optimizer = \"disk\"");
  ++t_;
  offloaded_->step(segments_, {nullptr, nullptr, &params, &grads}, constants(lr, grad_scale));
}

void ShardedAdamW::step_whole_parameters(const float* grad_shards, float lr, float grad_scale) {
  const auto& params = store_.params();
  step(grad_shards, [&](size_t p) { return params[p].data() + layout_.shard(p).begin_row * layout_.shard(p).row_numel; },
       lr, grad_scale);
}

void ShardedAdamW::append_moment_slices(std::vector<StateSlice>& slices, bool saved) {
  const auto& params = store_.params();
  for (size_t p = 0; p < params.size(); ++p) {
    const ParameterShard& s = layout_.shard(p);
    if (s.owned_numel() == 0) continue;
    if (offloaded_) {
      const int64_t at = offloaded_->layout().file_element(s.shard_offset);
      slices.push_back({StateSlice::exp_avg, &params[p], s.begin_row, s.end_row, nullptr, saved,
                        &offloaded_->exp_avg(), at});
      slices.push_back({StateSlice::exp_avg_sq, &params[p], s.begin_row, s.end_row, nullptr, saved,
                        &offloaded_->exp_avg_sq(), at});
      continue;
    }
    slices.push_back({StateSlice::exp_avg, &params[p], s.begin_row, s.end_row, m_.data<float>() + s.shard_offset, saved});
    slices.push_back({StateSlice::exp_avg_sq, &params[p], s.begin_row, s.end_row, v_.data<float>() + s.shard_offset,
                      saved});
  }
}

void all_gather_updated_rows(const ShardLayout& layout, const ParamSlots& slots, float* values,
                             Communicator& shard_comm) {
  const int g = layout.group_of(slots);
  const int64_t segment = layout.segment_numel(slots);
  Tensor mine = Tensor::empty({segment}, DType::f32, MemTag::comm);
  Tensor all = Tensor::empty({layout.ranks(g) * segment}, DType::f32, MemTag::comm);
  layout.pack(values, slots, layout.rank(g), mine.data<float>());
  shard_comm.all_gather(mine.data<float>(), all.data<float>(), static_cast<size_t>(segment), DType::f32);
  layout.unpack_all(all.data<float>(), slots, values);
}

namespace {

// The sums of this rank's squares over the shard groups (see sharded_grad_sum_of_squares).
ShardedSquares reduce_squares(double local, double experts, bool has_experts, Communicator& dense_comm,
                              Communicator& expert_comm) {
  float sum = static_cast<float>(local);
  dense_comm.all_reduce(&sum, 1, DType::f32, ReduceOp::sum);
  float expert_sum = static_cast<float>(experts);
  if (has_experts && expert_comm.size() > 1) expert_comm.all_reduce(&expert_sum, 1, DType::f32, ReduceOp::sum);
  return {sum, expert_sum};
}

}  // namespace

ShardedSquares sharded_grad_sum_of_squares(const float* grad_shards, const ShardLayout& layout,
                                           Communicator& dense_comm, Communicator& expert_comm,
                                           const std::vector<char>* counted) {
  double local = 0, experts = 0;
  bool has_experts = false;
  if (counted == nullptr) {
    local = sum_of_squares(grad_shards, layout.arena_numel());
  } else {
    for (size_t p = 0; p < counted->size(); ++p) {
      const ParameterShard& s = layout.shard(p);
      has_experts |= s.group == ShardLayout::experts;
      if (!(*counted)[p]) continue;
      (s.group == ShardLayout::experts ? experts : local) += sum_of_squares(grad_shards + s.shard_offset, s.padded_numel());
    }
  }
  return reduce_squares(local, experts, has_experts, dense_comm, expert_comm);
}

ShardedSquares streamed_grad_sum_of_squares(offload::SwapFile& grads, const offload::SwapLayout& swap, int depth,
                                            const ShardLayout& layout, Communicator& dense_comm,
                                            Communicator& expert_comm, const std::vector<char>* counted) {
  double local = 0, experts = 0;
  bool has_experts = false;
  SquaresFold whole, param;  // the whole arena (counted == null), or the parameter at `p`
  size_t p = 0;
  const size_t params = counted ? counted->size() : 0;
  offload::stream_chunks(swap, {{&grads, false, MemTag::grads}}, depth,
                         [&](int64_t, int64_t begin, int64_t end, float* const* values) {
                           if (!counted) return whole.add(values[0], end - begin);
                           for (; p < params; ++p) {  // the parameters in this chunk, in arena order
                             const ParameterShard& s = layout.shard(p);
                             const int64_t lo = std::max(s.shard_offset, begin);
                             const int64_t hi = std::min(s.shard_offset + s.padded_numel(), end);
                             if (hi > lo) param.add(values[0] + (lo - begin), hi - lo);
                             if (s.shard_offset + s.padded_numel() > end) break;  // it goes on in the next chunk
                             has_experts |= s.group == ShardLayout::experts;
                             if ((*counted)[p]) (s.group == ShardLayout::experts ? experts : local) += param.total();
                             param = SquaresFold();
                           }
                         });
  if (!counted) local = whole.total();
  for (; p < params; ++p) has_experts |= layout.shard(p).group == ShardLayout::experts;  // empty trailing ones
  return reduce_squares(local, experts, has_experts, dense_comm, expert_comm);
}

}  // namespace ndt
