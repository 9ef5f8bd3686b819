// The compute order of the V schedules, zb_v and dualpipev (parallel/pipeline/schedule.h
// describes both): one rank's Forward, Backward, BackwardInput and BackwardWeight actions
// over its two chunks of the V placement, without communication. Used by schedule.cpp,
// which adds the sends and receives.
#pragma once

#include "parallel/pipeline/schedule.h"

#include <vector>

namespace ndt {

struct VComputeOrder {
  std::vector<PipelineAction> actions;  // compute only
  // Per action: whether it is a forward run as one F&B with the backward after it, which
  // then waits for both inputs before the forward (DualPipeV's pairs).
  std::vector<char> paired;
};

// Both take a shape with the V placement and v = 2 (check_pipeline_shape) and accept any
// m >= 1: below the micro-batches their phases need (zb_v 2 pp - 1, dualpipev 2 pp) they
// run the order of that many and leave out the micro-batches past m, which removes work
// and waits but adds no dependency, so the order stays valid.
VComputeOrder zb_v_compute(const PipelineShape& shape, int rank);
VComputeOrder dualpipev_compute(const PipelineShape& shape, int rank);

}  // namespace ndt
