// The optimizer side of ZeRO: AdamW on the rows this rank owns under a ShardLayout
// (moments and gradient shards in shard layout), and the global gradient norm summed
// over the shard groups. Shared by ZeroDataParallel (stage 1) and
// FullyShardedDataParallel (stages 2 and 3), which differ in where the owned rows live.
// With offload.optimizer = "disk" the moments live in swap files and the step streams
// them (parallel/data/offloaded_moments.h): bitwise the same update.
// Memory: moments 8 bytes per padded shard element in memory, or on disk with offload.
#pragma once

#include "comm/communicator.h"
#include "optim/adamw.h"
#include "parallel/data/gradient_sync.h"
#include "parallel/data/offloaded_moments.h"
#include "parallel/data/shard_layout.h"

#include <functional>
#include <memory>

namespace ndt {

class ShardedAdamW {
 public:
  // swap: offload.optimizer = "disk", the moments in swap files of this space (one per
  // unit of the store's num_units); null: in memory.
  ShardedAdamW(const ParameterStore& store, const ShardLayout& layout, const AdamWConfig& config,
               offload::SwapSpace* swap = nullptr);

  // One update. grad_shards holds layout.arena_numel() elements; owned_rows(p) is where
  // parameter p's owned rows are (they are updated in place).
  void step(const float* grad_shards, const std::function<float*(size_t p)>& owned_rows, float lr,
            float grad_scale);
  // The same on the owned rows of the store's whole parameters (stages 1 and 2).
  void step_whole_parameters(const float* grad_shards, float lr, float grad_scale);
  // Parameter offload (FSDP): the parameter and gradient shards streamed from these swap
  // files (the moments' layout) beside the moments.
  void step_streamed(offload::SwapFile& params, offload::SwapFile& grads, float lr, float grad_scale);
  // The moments' swap files and layout; null without offload.
  OffloadedMoments* offloaded() { return offloaded_.get(); }

  // The owned rows of the moments, for checkpoints (saved: see StateSlice).
  void append_moment_slices(std::vector<StateSlice>& slices, bool saved);
  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }

 private:
  const ParameterStore& store_;
  const ShardLayout& layout_;
  kernels::AdamWStep constants(float lr, float grad_scale) const;

  AdamWConfig config_;
  Tensor m_, v_;  // in memory (no offload)
  std::unique_ptr<OffloadedMoments> offloaded_;
  std::vector<AdamWSegment> segments_;  // the owned rows of every parameter, in arena order
  int64_t t_ = 0;
};

// After step_whole_parameters: every rank's updated rows of the listed parameters (all
// of one shard group, whose communicator is shard_comm) are all-gathered into the
// whole parameters at `values` (per call: one block per rank).
void all_gather_updated_rows(const ShardLayout& layout, const ParamSlots& slots, float* values,
                             Communicator& shard_comm);

// The sums of squares over the gradient shards: of the dense parameters over their
// shard group (dense_comm), and of the experts (parameters sharded on ep) over theirs
// (expert_comm, edp_shard; GradientSync::finish_norm then sums them over ep). Padding
// rows are zero, and replicas (HSDP) hold copies, so they are not summed. counted (one
// entry per parameter; null: all, and no experts) leaves out the parameters this rank
// does not count (GradientSync::counted_in_norm).
struct ShardedSquares {
  double dense = 0;
  double experts = 0;
};
ShardedSquares sharded_grad_sum_of_squares(const float* grad_shards, const ShardLayout& layout,
                                           Communicator& dense_comm, Communicator& expert_comm,
                                           const std::vector<char>* counted);
// The same with the gradient shards in a swap file of layout `swap` (parameter offload),
// streamed in arena order with `depth` chunks read ahead: the same sums, bit for bit
// (optim/clip.h's SquaresFold keeps sum_of_squares's chunks and order).
ShardedSquares streamed_grad_sum_of_squares(offload::SwapFile& grads, const offload::SwapLayout& swap, int depth,
                                            const ShardLayout& layout, Communicator& dense_comm,
                                            Communicator& expert_comm, const std::vector<char>* counted);

}  // namespace ndt
