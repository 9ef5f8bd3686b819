// A step's mixture-of-experts totals over the whole job: every rank counts the routing
// of its own tokens (its rows of the batch, its part of each sequence under cp, its
// pipeline stages' MoE blocks); ranks of one tp group route the same tokens alike, so
// only tp rank 0's count. Communicates: one all-reduce over the world of 6 + E floats.
#pragma once

#include "comm/device_mesh.h"
#include "model/moe.h"

#include <cstdint>
#include <vector>

namespace ndt {

struct MoeJobTotals {
  double aux_sum = 0, z_sum = 0;  // the loss terms, in token-loss units
  double dropped = 0, assignments = 0;  // token x slot assignments capacity dropped, and all
  std::vector<int64_t> tokens_per_expert;
  // The experts' load: the most loaded ep rank's expert-side rows over the mean rank's,
  // over the step's blocks and micro-batches (1: balanced routing, or ep = 1).
  double expert_load = 1;
};

// Collective over the world.
MoeJobTotals sum_moe_totals(const MoeTotals& local, int n_experts, DeviceMesh& mesh);

}  // namespace ndt
