// Before a run allocates anything: a run whose one rank needs more memory than this whole
// machine has is refused, naming the settings that ask for it and the bytes, instead of
// ending in "std::bad_alloc" (or in the kernel's out-of-memory killer). The figures are
// lower bounds in double precision, so no setting can overflow them and nothing that
// fits is refused: the model states of the largest share of the parameters a rank can
// hold, and per micro-batch the token buffers, the residual stream every unit keeps and
// (without context parallelism) one block's attention probabilities.
#pragma once

#include "comm/device_mesh.h"
#include "train/config.h"

namespace ndt {

struct RunMemoryFloor {
  double model_states = 0;  // parameters, gradients, AdamW moments of the busiest rank (in memory, not offloaded)
  double batch = 0;         // one micro-batch: inputs and targets, residual streams, probabilities
};
// `mesh`: the resolved mesh; config.micro_batch_size resolved (not 0).
RunMemoryFloor run_memory_floor(const RunConfig& config, const MeshShape& mesh);

// Throws ndt::Error naming the settings and the bytes when run_memory_floor exceeds
// `machine_bytes` (physical_memory_bytes(); 0: unknown, nothing is checked).
void check_run_fits_in_memory(const RunConfig& config, const MeshShape& mesh, double machine_bytes);

}  // namespace ndt
