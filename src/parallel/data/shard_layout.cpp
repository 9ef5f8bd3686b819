#include "parallel/data/shard_layout.h"

#include "core/error.h"
#include "kernels/kernels.h"
#include "parallel/data/state_slice.h"

#include <algorithm>

namespace ndt {

ShardLayout::ShardLayout(const ParameterStore& store, int rank, int ranks)
    : ShardLayout(store, ShardGroup{rank, ranks}, ShardGroup{rank, ranks}) {}

ShardLayout::ShardLayout(const ParameterStore& store, ShardGroup dense_group, ShardGroup expert_group,
                         Members members)
    : groups_{dense_group, expert_group} {
  for (const ShardGroup& g : groups_) {
    NDT_CHECK(g.ranks >= 1 && g.rank >= 0 && g.rank < g.ranks, "shard rank {} of {} ranks", g.rank, g.ranks);
  }
  for (const Parameter& p : store.params()) {
    ParameterShard s;
    s.group = p.sharded_on(Axis::ep) ? experts : dense;
    const ShardGroup& g = groups_[static_cast<size_t>(s.group)];
    s.rows = p.local_shape.empty() ? 1 : p.local_shape[0];
    s.row_numel = s.rows == 0 ? 0 : p.numel() / s.rows;
    const bool member = members == Members::all || p.trainable();
    s.rows_per_rank = member ? (s.rows + g.ranks - 1) / g.ranks : 0;
    s.begin_row = std::min(s.rows, g.rank * s.rows_per_rank);
    s.end_row = std::min(s.rows, (g.rank + 1) * s.rows_per_rank);
    s.shard_offset = arena_numel_;
    arena_numel_ += s.padded_numel();
    shards_.push_back(s);
    full_offsets_.push_back(p.arena_offset);
    grad_offsets_.push_back(p.trainable() ? p.grad_offset : -1);
  }
}

ParamSlots ShardLayout::arena_slots(size_t p0, size_t p1) const {
  ParamSlots slots;
  for (size_t p = p0; p < p1; ++p) {
    slots.params.push_back(p);
    slots.offsets.push_back(full_offsets_[p]);
  }
  return slots;
}

ParamSlots ShardLayout::grad_arena_slots(size_t p0, size_t p1) const {
  ParamSlots slots;
  for (size_t p = p0; p < p1; ++p) {
    if (grad_offsets_[p] < 0) continue;
    slots.params.push_back(p);
    slots.offsets.push_back(grad_offsets_[p]);
  }
  return slots;
}

std::vector<ParamSlots> ShardLayout::by_group(const ParamSlots& slots) const {
  std::vector<ParamSlots> split(groups_.size());
  for (size_t i = 0; i < slots.params.size(); ++i) {
    ParamSlots& part = split[static_cast<size_t>(shards_[slots.params[i]].group)];
    part.params.push_back(slots.params[i]);
    part.offsets.push_back(slots.offsets[i]);
  }
  return split;
}

int ShardLayout::group_of(const ParamSlots& slots) const {
  const int g = slots.params.empty() ? dense : shards_[slots.params[0]].group;
  for (size_t p : slots.params) {
    NDT_CHECK(shards_[p].group == g, "shard layout: parameters {} and {} are sharded over different groups",
              slots.params[0], p);
  }
  return g;
}

int64_t ShardLayout::segment_numel(const ParamSlots& slots) const {
  int64_t n = 0;
  for (size_t p : slots.params) n += shards_[p].padded_numel();
  return n;
}

void ShardLayout::pack(const float* full, const ParamSlots& slots, int r, float* out) const {
  for (size_t i = 0; i < slots.params.size(); ++i) {
    const ParameterShard& s = shards_[slots.params[i]];
    const int64_t begin = std::min(s.rows, r * s.rows_per_rank);
    const int64_t end = std::min(s.rows, (r + 1) * s.rows_per_rank);
    const int64_t real = (end - begin) * s.row_numel;
    kernels::copy(out, full + slots.offsets[i] + begin * s.row_numel, real);
    kernels::zero(out + real, s.padded_numel() - real);
    out += s.padded_numel();
  }
}

void ShardLayout::unpack_all(const float* in, const ParamSlots& slots, float* full) const {
  const int n = ranks(group_of(slots));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < slots.params.size(); ++i) {
      const ParameterShard& s = shards_[slots.params[i]];
      const int64_t begin = std::min(s.rows, r * s.rows_per_rank);
      const int64_t end = std::min(s.rows, (r + 1) * s.rows_per_rank);
      kernels::copy(full + slots.offsets[i] + begin * s.row_numel, in, (end - begin) * s.row_numel);
      in += s.padded_numel();
    }
  }
}

std::vector<char> ShardLayout::whole_parameter_writers(const std::vector<Parameter>& params) const {
  std::vector<char> writes(params.size(), 0);
  for (int g = 0; g < static_cast<int>(groups_.size()); ++g) {
    std::vector<size_t> members;
    std::vector<Parameter> held;
    for (size_t p = 0; p < params.size(); ++p) {
      if (shards_[p].group == g) members.push_back(p), held.push_back(params[p]);
    }
    const std::vector<int> writer = balanced_writers(held, ranks(g));
    for (size_t k = 0; k < members.size(); ++k) writes[members[k]] = writer[k] == rank(g);
  }
  return writes;
}

std::vector<std::pair<int64_t, int64_t>> ShardLayout::unit_ranges(const std::vector<Parameter>& params,
                                                                  int units) const {
  std::vector<std::pair<int64_t, int64_t>> ranges(static_cast<size_t>(units), {0, 0});
  int last = -1;
  for (size_t p = 0; p < params.size(); ++p) {
    const int u = params[p].unit();
    NDT_CHECK(u >= 0 && u < units && u >= last, "shard layout: parameter {} of unit {} follows one of unit {}",
              params[p].name(), u, last);
    const ParameterShard& s = shards_[p];
    auto& r = ranges[static_cast<size_t>(u)];
    if (u != last) r = {s.shard_offset, s.shard_offset};
    r.second = s.shard_offset + s.padded_numel();
    last = u;
  }
  return ranges;
}

}  // namespace ndt
