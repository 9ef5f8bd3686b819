// A row of the multi-rank layout tables (test_feature_matrix.cpp, test_lora.cpp): a mesh,
// the ZeRO stage, sequence parallel, micro-batching, the pipeline schedule and the
// recompute policy, applied to a run config.
#pragma once

#include "train/config.h"

namespace ndt::testing {

struct Layout {
  const char* name;
  MeshShape mesh;            // dp_replicate 0: the rest of the world
  int zero_stage = 0;
  bool sequence_parallel = false;
  int micro = 0;             // train.micro_batch_size (0: no accumulation)
  const char* refused = "";  // not supported: the error must contain this
  const char* schedule = "1f1b";                      // parallel.pp_schedule
  CheckpointMode recompute = CheckpointMode::none;    // train.activation_checkpointing
};

inline MeshShape mesh(int pp, int dp_shard, int cp, int tp, int ep) {
  MeshShape m;
  m.pp = pp, m.dp_replicate = 0, m.dp_shard = dp_shard, m.cp = cp, m.tp = tp, m.ep = ep;
  return m;
}

// USP: the mesh's cp as cp_ulysses Ulysses ranks x the ring (with_layout sets
// parallel.cp_mode = "usp" for a mesh with cp_ulysses > 1).
inline MeshShape usp(MeshShape m, int cp_ulysses) {
  m.cp_ulysses = cp_ulysses;
  return m;
}

inline RunConfig with_layout(RunConfig config, const Layout& layout) {
  config.mesh = layout.mesh;
  if (layout.mesh.cp_ulysses > 1) config.cp_mode = CpMode::usp;
  config.zero_stage = layout.zero_stage;
  config.sequence_parallel = layout.sequence_parallel;
  config.micro_batch_size = layout.micro;
  config.pp_schedule = pipeline_schedule_from_name(layout.schedule);
  config.activation_checkpointing.mode = layout.recompute;
  return config;
}

}  // namespace ndt::testing
