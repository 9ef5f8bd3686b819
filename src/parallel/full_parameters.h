// Every parameter's whole (logical) value on every rank, whatever the layout: the
// inverse of the placements parallelize() declared. This rank's local blocks (ZeRO /
// FSDP shards gathered by the gradient sync) are joined over ep (the experts), then over
// tp (Megatron blocks), then summed over pp (each stage fills its own parameters,
// zeros elsewhere; the last stage's copy of a tied embedding cleared first).
// Communicates: the sync's gathers, all-gathers over ep and tp, one all-reduce of the
// whole model over pp. For tests, conversions and checks: not on a training hot path.
#pragma once

#include "comm/device_mesh.h"
#include "model/parameter.h"
#include "parallel/data/gradient_sync.h"

#include <vector>

namespace ndt {

// In store order. Collective over the mesh.
std::vector<float> gather_full_parameters(const ParameterStore& store, GradientSync& sync, DeviceMesh& mesh);

}  // namespace ndt
