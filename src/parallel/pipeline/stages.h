// Pipeline parallelism splits the model's units (model/unit.h: the embedding, the
// blocks, the head) into pp x v contiguous chunks, placed on the pp ranks by the
// schedule's placement (PipelineShape::rank_of, parallel/pipeline/schedule.h). This file decides the split and communicates
// nothing: by default it balances a cost model, per token the training FLOPs of each
// unit (a block 6 x its parameters + 12 x d_model x T; the head 6 x vocab x d_model
// for the output layer; the embedding a lookup, 0), minimising the largest chunk;
// parallel.pp_layers overrides it with the number of blocks of each chunk.
#pragma once

#include "model/config.h"
#include "parallel/pipeline/schedule.h"

#include <string>
#include <vector>

namespace ndt {

struct PipelineStages {
  // Chunk c runs units [first_unit[c], first_unit[c + 1]); first_unit.back() is the
  // number of units.
  std::vector<int> first_unit;
  int chunks() const { return static_cast<int>(first_unit.size()) - 1; }
  int chunk_of_unit(int unit) const;
  // One flag per unit: whether pp rank `rank` runs it (its chunks under the shape's
  // placement).
  std::vector<char> local_units(int rank, const PipelineShape& shape) const;
  // "units 0-3 | 4-7", for the run header.
  std::string describe() const;
};

// blocks_per_chunk: empty for the cost model, else one count per chunk (summing to
// n_layer; every chunk but the first and the last at least 1). Throws naming
// parallel.pp, parallel.pp_virtual_stages or parallel.pp_layers and the values when the
// model has fewer blocks than chunks need.
PipelineStages partition_pipeline(const ModelConfig& config, int seq_len, int chunks,
                                  const std::vector<int>& blocks_per_chunk = {});
// Its checks alone (what the config's validation needs), without the cost model.
void check_pipeline_partition(const ModelConfig& config, int chunks, const std::vector<int>& blocks_per_chunk = {});

// Parses parallel.pp_layers ("3,3" or empty).
std::vector<int> parse_pipeline_layers(const std::string& text);

}  // namespace ndt
