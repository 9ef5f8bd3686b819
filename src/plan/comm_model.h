// The communication model: one optimizer step's collectives and messages on one rank,
// per mesh axis, as that rank's Communicator counters (comm/communicator.h) count them,
// and the peak of the ledger's `comm` tag, computed from the run config alone (no
// tensors, no MPI). It follows what the code does, call by call: the data-parallel
// layouts (DDP buckets, ZeRO-1, FSDP stages 2 and 3 with prefetch and resharding, HSDP),
// tensor parallelism (the Megatron regions, sequence parallel, the vocab-parallel loss,
// partial gradients), context parallelism (ring, Ulysses), pipeline parallelism (the
// schedule's boundary messages), expert parallelism (the count exchange and the
// all-to-all-v's) and the trainer's small collectives (loss, norm, MoE totals, the
// non-finite agreement, fp8 amaxes). The planner (plan/planner.h) and the comm tests
// call it: one source of truth for the theory the counters are held to.
//
// Exact: calls, payload and wire bytes of every operation but all_to_all_v; the
// all_to_all_v calls and the payload of those that send this rank's token rows (the
// dispatch forward and the gradients' return in backward: N x top_k rows of d_model
// floats per MoE block, dropless). Expectation (balanced routing, dropless): the payload
// of the other all_to_all_v's (the rows this rank's experts received, exact when summed
// over the ep group) and every all_to_all_v's wire bytes ((ep - 1) / ep of the payload).
// docs/planner.md "Communication model" lists the formulas.
#pragma once

#include "comm/communicator.h"
#include "core/axis.h"
#include "parallel/pipeline/stages.h"
#include "train/config.h"

#include <array>
#include <cstdint>

namespace ndt {

struct OpVolume {
  int64_t calls = 0;
  int64_t payload_bytes = 0;
  int64_t wire_bytes = 0;
};

struct AxisVolume {
  std::array<OpVolume, kNumCommOps> ops{};
  const OpVolume& operator[](CommOp op) const { return ops[static_cast<size_t>(op)]; }
  OpVolume& operator[](CommOp op) { return ops[static_cast<size_t>(op)]; }
  int64_t calls() const;
  int64_t payload_bytes() const;
  int64_t wire_bytes() const;
};

// One optimizer step's communication of one rank, per mesh axis (indexed by Axis,
// core/axis.h), as that rank's Communicator counters count it. Axes that are the same
// communicator (without cp, dp_shard_cp is dp_shard and dp_cp is dp; with ep = 1, edp
// is dp_cp and edp_shard dp_shard_cp) show the same counts, as the counters do.
// Besides the mesh axes: the world communicator (the trainer's agreement and MoE totals,
// fp8 amaxes), and the pair of the first and last pp ranks that sums a tied embedding's
// gradient (its own communicator, not the pp axis's).
struct StepCommunication {
  std::array<AxisVolume, kNumAxes> axes{};
  AxisVolume world;
  AxisVolume tied_embedding;
  const AxisVolume& operator[](Axis a) const { return axes[static_cast<size_t>(a)]; }
  AxisVolume& operator[](Axis a) { return axes[static_cast<size_t>(a)]; }
};

// config: as `ndtrain train` would run it (validated), on world_size ranks; pp_stage:
// which pipeline stage (pp coordinate) the rank is. A step without loss-scale overflow,
// spike, rollback or checkpoint save in it. stages: the partition of the units
// (partition_pipeline with the config's settings), when the caller has it: it costs more
// than the rest of a prediction (a planner computes it once per pipeline shape); null:
// computed here. Cost: O(parameters + layers + the pipeline schedule's actions of the
// rank), no tensors.
StepCommunication predict_step_communication(const RunConfig& config, int world_size, int pp_stage = 0,
                                             const PipelineStages* stages = nullptr);

// Peak bytes of ledger tag `comm` (core/memory.h) on that rank during a step: FSDP's
// gather and reduce-scatter buffers, ZeRO's packed buckets and gathered rows, low-precision
// staging, the experts' exchange scratch, the pipeline's gradient copies, the ring
// reduce-scatter's incoming block. See docs/planner.md for which parts are exact.
int64_t predict_comm_buffer_bytes(const RunConfig& config, int world_size, int pp_stage = 0,
                                  const PipelineStages* stages = nullptr);

}  // namespace ndt
