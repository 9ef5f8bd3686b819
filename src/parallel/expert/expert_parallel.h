// Expert parallelism (GShard, Switch; torchtitan's layout): the routed experts of
// every MoE block split over the ep group, rank r holding experts [r x E / ep,
// (r + 1) x E / ep) whole (dim 0 of every expert weight: Shard(0) on ep). The ep ranks
// are borrowed from the data-parallel ranks (dp_shard x cp, core/axis.h): each has
// its own tokens, and sends every routed row to the rank holding its expert.
// Communicates, over ep, per MoE block and micro-batch (C the model width, rows the
// routed (token, expert) assignments): an all-gather of each rank's E per-expert row
// counts (int32) in forward, kept for backward (every rank learns every rank's load);
// then all-to-all-v's of rows of C floats, dispatch (this rank's token rows out, its
// experts' rows in) and combine (the reverse) in forward, and the same two, reversed,
// for the gradients in backward.
// A row that stays on its rank is copied, not sent: wire bytes count the others.
// The experts' gradients are summed over edp (the ranks holding the same experts,
// dp_cp / ep of them; parallel/data/data_parallel.h), the other parameters' over dp_cp;
// under ZeRO and FSDP reduce-scattered over edp_shard (edp within a replica) and
// all-reduced over dp_replicate (parallel/data/zero_stage1.h, parallel/data/fsdp.h).
// Memory per rank: the expert parameters' model states / ep (DDP: 16 bytes x expert
// parameters / ep; sharded further over edp_shard by ZeRO; parallel/memory_model.h),
// and during each exchange one scratch buffer of the received (or sent) expert-side
// rows, tag comm.
#pragma once

#include "comm/communicator.h"
#include "model/config.h"
#include "model/expert_dispatch.h"
#include "model/parameter.h"

#include <cstdint>
#include <vector>

namespace ndt {

// Throws unless ep > 1 can run: a mixture-of-experts model whose experts divide by ep,
// naming the values. (Every data-parallel layout runs with it: DDP, ZeRO-1/2/3, HSDP.)
void validate_expert_parallel(const ModelConfig& config, int ep);

class ExpertParallel : public ExpertDispatch {
 public:
  // ep: the ep group's communicator (DeviceMesh::axis(Axis::ep)).
  explicit ExpertParallel(Communicator& ep) : ep_(ep) {}
  int size() const override { return ep_.size(); }
  int rank() const override { return ep_.rank(); }
  // Exchanges the counts: route.recv_counts[src][le] = rank src's send_counts[first + le];
  // most_loaded_rows, the most any rank of the group receives.
  void plan(ExpertRoute& route) const override;
  // Dispatch: all-to-all-v of the token-side rows (those of rank j's experts are
  // contiguous: its block), then the received [src][le] blocks regrouped [le][src].
  void to_experts(const ExpertRoute& route, const float* tokens, float* experts, int64_t width) const override;
  // Combine, the exact inverse: [le][src] regrouped [src][le], all-to-all-v back.
  void from_experts(const ExpertRoute& route, const float* experts, float* tokens, int64_t width) const override;

 private:
  Communicator& ep_;
};

// Joins the ep blocks of every expert parameter (Shard(0) on ep: all ep ranks' blocks
// in rank order along dim 0) from this rank's local blocks at `local_values` (an arena
// laid out like the store's), the other parameters copied. The result holds each
// parameter's tensor-parallel block, whole on every other axis, in store order (a
// parameter not on this pipeline stage: nothing): the input of gather_tensor_parallel
// (parallel/tensor/tensor_parallel.h), which then gives the logical values, as one rank lays
// them out. So: local -> gather_expert_parallel -> gather_tensor_parallel. ep ==
// nullptr or of size 1: a copy. Collective over ep.
std::vector<float> gather_expert_parallel(const ParameterStore& store, const float* local_values, Communicator* ep);

}  // namespace ndt
