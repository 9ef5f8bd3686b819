// Seq1F1B (Sun et al. 2024, "Seq1F1B: Efficient Sequence-Level Pipeline Parallelism for
// Large Language Model Training"): the schedule's order of work. Splits each
// micro-batch's sequences into k chunks of T / k tokens that pass the pipeline as
// separate units; communicates each unit's boundary tensor (1 / k of a micro-batch's)
// like 1f1b does a micro-batch's.
//
// Forward runs the units in order (micro-batch 0's sequence chunks 0..k-1, then
// micro-batch 1's, ...); backward runs micro-batches in order but each one's sequence
// chunks last first, since the attention of chunk s reads the keys and values of the
// chunks before it, and its backward adds to their gradients before they run. Rank r
// warms up with pp - r - 1 + k - 1 forwards (the last rank needs all k chunks of
// micro-batch 0 before the backward of the last), then alternates one forward and one
// backward: at most pp - r + k - 1 units live, each 1 / k of a micro-batch's
// activations (1f1b: pp - r micro-batches).
#pragma once

#include "parallel/pipeline/schedule.h"

#include <vector>

namespace ndt {

// Rank `rank`'s compute actions (no communication), v = 1.
std::vector<PipelineAction> seq1f1b_compute(const PipelineShape& shape, int rank);

}  // namespace ndt
