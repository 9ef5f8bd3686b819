// Dim-0 sharding of every parameter across the ranks of one mesh axis (dp_shard):
// rank r owns rows [r * R', (r + 1) * R') of a parameter with R rows, R' = ceil(R / n),
// clipped to R (so trailing ranks may own fewer rows, or none). Each rank's shards
// are laid out in parameter order in a "shard arena", every shard padded to R' rows,
// so collectives over a range of parameters have the same size on every rank.
// The placement this gives is Shard(0) on dp_shard (see Parameter::placements).
#pragma once

#include "model/parameter.h"

#include <cstdint>
#include <vector>

namespace ndt {

// A list of parameters and where each one's full tensor starts in some buffer (the
// parameter arena, or a gathered unit's buffer).
struct ParamSlots {
  std::vector<size_t> params;
  std::vector<int64_t> offsets;  // element offset of params[i] in the buffer
};

struct ParameterShard {
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
  ShardLayout(const ParameterStore& store, int rank, int ranks);

  int rank() const { return rank_; }
  int ranks() const { return ranks_; }
  const ParameterShard& shard(size_t param) const { return shards_[param]; }
  int64_t arena_numel() const { return arena_numel_; }  // per rank, padded
  // Parameters [p0, p1) at their offsets in the parameter arena.
  ParamSlots arena_slots(size_t p0, size_t p1) const;
  // Padded shard elements of the listed parameters (one rank's block).
  int64_t segment_numel(const ParamSlots& slots) const;

  // Packs rank r's rows of the listed parameters from `full` into `out` (each padded to
  // R' rows with zeros), in list order: one rank's block of a reduce-scatter input, or
  // this rank's all-gather input.
  void pack(const float* full, const ParamSlots& slots, int r, float* out) const;
  // The inverse for all ranks: `in` holds n blocks as pack() writes them; their real
  // rows are copied into `full`.
  void unpack_all(const float* in, const ParamSlots& slots, float* full) const;

 private:
  int rank_, ranks_;
  std::vector<ParameterShard> shards_;
  std::vector<int64_t> full_offsets_;  // arena_offset of each parameter
  int64_t arena_numel_ = 0;
};

}  // namespace ndt
