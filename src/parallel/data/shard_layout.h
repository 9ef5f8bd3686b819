// Dim-0 sharding of every parameter across the ranks of its shard group: rank r owns
// rows [r * R', (r + 1) * R') of a parameter with R rows, R' = ceil(R / n) for the n
// ranks of its group, clipped to R (so trailing ranks may own fewer rows, or none).
// Two groups: the dense parameters shard over dp_shard (dp_shard_cp under context
// parallelism), and under expert parallelism the routed experts (parameters sharded on
// ep: this rank's E / ep experts) over edp_shard, the dp_shard_cp ranks holding the
// same experts (core/axis.h). Each rank's shards are laid out in parameter order in a
// "shard arena", every shard padded to R' rows, so collectives over a range of
// parameters of one group have the same size on every rank of that group.
// The placement this gives is Shard(0) on dp_shard, or on edp_shard for the experts
// (see Parameter::placements).
// A layout of the trainable parameters only (Members::trainable: what gradients and
// optimizer moments need) gives every frozen parameter no rows on any rank: no shard,
// no place in the arena, nothing packed or reduced.
#pragma once

#include "model/parameter.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace ndt {

// A list of parameters and where each one's full tensor starts in some buffer (the
// parameter arena, or a gathered unit's buffer).
struct ParamSlots {
  std::vector<size_t> params;
  std::vector<int64_t> offsets;  // element offset of params[i] in the buffer
};

// This rank's place in the ranks a parameter is sharded over.
struct ShardGroup {
  int rank = 0;
  int ranks = 1;
};

struct ParameterShard {
  int group = 0;               // ShardLayout::dense or ShardLayout::experts
  int64_t rows = 0;            // R, logical rows
  int64_t row_numel = 0;       // elements per row
  int64_t rows_per_rank = 0;   // R' = ceil(R / n)
  int64_t begin_row = 0;       // this rank's first row (clipped to R)
  int64_t end_row = 0;         // one past its last row (clipped to R)
  int64_t shard_offset = 0;    // where its padded shard starts in the shard arena
  int64_t padded_numel() const { return rows_per_rank * row_numel; }
  int64_t owned_numel() const { return (end_row - begin_row) * row_numel; }
};

class ShardLayout {
 public:
  static constexpr int dense = 0, experts = 1;
  enum class Members { all, trainable };

  // Every parameter over one group of `ranks` ranks.
  ShardLayout(const ParameterStore& store, int rank, int ranks);
  // The parameters sharded on ep (Parameter::sharded_on) over `expert_group`, the rest
  // over `dense_group`.
  ShardLayout(const ParameterStore& store, ShardGroup dense_group, ShardGroup expert_group,
              Members members = Members::all);

  // This rank's place in group g (dense or experts).
  int rank(int g = dense) const { return groups_[static_cast<size_t>(g)].rank; }
  int ranks(int g = dense) const { return groups_[static_cast<size_t>(g)].ranks; }
  const ParameterShard& shard(size_t param) const { return shards_[param]; }
  int64_t arena_numel() const { return arena_numel_; }  // per rank, padded
  // Parameters [p0, p1) at their offsets in the parameter (value) arena, and the
  // trainable ones among them at their offsets in the gradient arena.
  ParamSlots arena_slots(size_t p0, size_t p1) const;
  ParamSlots grad_arena_slots(size_t p0, size_t p1) const;
  // The listed parameters split by group: entry g holds those of group g, in list order
  // (an entry may be empty). Collectives run per entry, over that group's ranks.
  std::vector<ParamSlots> by_group(const ParamSlots& slots) const;
  // The group of the listed parameters, all of one group (checked); dense if none.
  int group_of(const ParamSlots& slots) const;
  // Padded shard elements of the listed parameters (one rank's block).
  int64_t segment_numel(const ParamSlots& slots) const;

  // Packs rank r's rows of the listed parameters (all of one group) from `full` into
  // `out` (each padded to R' rows with zeros), in list order: one rank's block of a
  // reduce-scatter input, or this rank's all-gather input.
  void pack(const float* full, const ParamSlots& slots, int r, float* out) const;
  // The inverse for all ranks of the listed parameters' group: `in` holds its n blocks
  // as pack() writes them; their real rows are copied into `full`.
  void unpack_all(const float* in, const ParamSlots& slots, float* full) const;

  // Layouts keeping whole parameters (stages 1 and 2), replicated over each group:
  // whether this rank is the one of its group that writes parameter p to a checkpoint,
  // chosen per group to balance the bytes (balanced_writers).
  std::vector<char> whole_parameter_writers(const std::vector<Parameter>& params) const;

  // Each unit's [begin, end) in the shard arena (units * entries; a unit with no
  // parameters here: an empty range): the units' parameters are contiguous and in unit
  // order, so their shards are too. Offload's swap layout (offload/swap_layout.h).
  std::vector<std::pair<int64_t, int64_t>> unit_ranges(const std::vector<Parameter>& params, int units) const;

 private:
  std::vector<ShardGroup> groups_;
  std::vector<ParameterShard> shards_;
  std::vector<int64_t> full_offsets_;  // arena_offset of each parameter
  std::vector<int64_t> grad_offsets_;  // grad_offset of each parameter (-1: frozen)
  int64_t arena_numel_ = 0;
};

}  // namespace ndt
