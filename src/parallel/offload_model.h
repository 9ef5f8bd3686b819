// The memory model's disk tier (offload, docs/offload.md): for a layout and its offload
// settings, from the parameter shapes alone, what each kind of model state keeps in
// memory and on disk, its peak in memory during a step, and the swap-file bytes a step
// reads and writes. The ledger (core/memory.h) measures the same: tests hold its
// per-tag peaks on one rank to `peak` exactly, and its disk tier to `disk`.
// With n = dp_shard, Psi the parameters and Psi_s = sum of padded shards (Psi / n), C(x)
// x rounded up to whole chunks per unit, D = offload.prefetch, c = chunk elements:
//   resident after a step   no offload: as memory_model.h;  optimizer offload: the moments
//                           leave (0); with parameter offload everything leaves (0, 0, 0)
//   disk                    moments 8 C(Psi_s); parameter offload: params 4 C(Psi_s), grads 4 C(Psi_s)
//   peak (bytes, per tag)   stage 1: params 4 Psi, grads 4 (Psi + Psi_s)
//                           stage 2: params 4 Psi, grads 4 (Psi_s + root + largest block)
//                           stage 3: params and grads 4 (Psi_s + root + largest block), or
//                           with parameter offload the gathered units and read-ahead shards of
//                           FSDP's schedule (simulated: simulate_fsdp_offload), or the step's
//                           stream if larger
//                           optimizer: 8 Psi_s in memory; offloaded, the step's stream
//                           4 (D + 2) c x 2 files
//   I/O per step            optimizer: reads and writes 8 C(Psi_s); parameter offload adds,
//                           per micro-batch, reads of each gathered unit's shards (the root
//                           once, a block twice) and 4 C(Psi_s) of gradient writes (reads
//                           too from the second micro-batch on), then the norm's read of the
//                           gradients and the step's of parameters and gradients and write
//                           of parameters.
// The root group is the embedding with the head (units 0 and L + 1), each block a group,
// as parallelize() groups them; the peaks assume one pipeline stage (pp = 1) and low
// precision's compute copies where the layout keeps them.
#pragma once

#include "model/parameter.h"
#include "parallel/memory_model.h"

#include <cstdint>
#include <vector>

namespace ndt {

struct OffloadSettings {
  bool optimizer = false;  // offload.optimizer = "disk"
  bool params = false;     // offload.params = "disk"
  int64_t chunk_bytes = 4 << 20;
  int prefetch = 2;
  bool gather_prefetch = true;        // parallel.prefetch
  bool reshard_after_forward = true;  // parallel.reshard_after_forward
  int micro_batches = 1;
};

struct TieredStates {
  ModelStateBytes resident;  // in memory after a step
  ModelStateBytes disk;      // swap files at their full size
  ModelStateBytes peak;      // in memory at most during a step (model states and their staging)
  int64_t read_bytes = 0, write_bytes = 0;  // swap-file I/O of a step after the first
  int64_t stream_bytes = 0;  // of those read and written, what the norm and the optimizer step stream
};

// specs: as predict_model_states takes them (one tp rank's blocks, every unit present).
TieredStates predict_tiered_states(const std::vector<ParameterSpec>& specs, int dp_shard, int zero_stage,
                                   const OffloadSettings& offload, DType compute = DType::f32, int ep = 1);

}  // namespace ndt
