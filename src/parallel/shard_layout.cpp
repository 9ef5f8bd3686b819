#include "parallel/shard_layout.h"

#include "core/error.h"
#include "kernels/kernels.h"

#include <algorithm>

namespace ndt {

ShardLayout::ShardLayout(const ParameterStore& store, int rank, int ranks) : rank_(rank), ranks_(ranks) {
  NDT_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "shard rank {} of {} ranks", rank, ranks);
  for (const Parameter& p : store.params()) {
    ParameterShard s;
    s.rows = p.local_shape.empty() ? 1 : p.local_shape[0];
    s.row_numel = s.rows == 0 ? 0 : p.numel() / s.rows;
    s.rows_per_rank = (s.rows + ranks - 1) / ranks;
    s.begin_row = std::min(s.rows, rank * s.rows_per_rank);
    s.end_row = std::min(s.rows, (rank + 1) * s.rows_per_rank);
    s.shard_offset = arena_numel_;
    arena_numel_ += s.padded_numel();
    shards_.push_back(s);
    full_offsets_.push_back(p.arena_offset);
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
  for (int r = 0; r < ranks_; ++r) {
    for (size_t i = 0; i < slots.params.size(); ++i) {
      const ParameterShard& s = shards_[slots.params[i]];
      const int64_t begin = std::min(s.rows, r * s.rows_per_rank);
      const int64_t end = std::min(s.rows, (r + 1) * s.rows_per_rank);
      kernels::copy(full + slots.offsets[i] + begin * s.row_numel, in, (end - begin) * s.row_numel);
      in += s.padded_numel();
    }
  }
}

}  // namespace ndt
