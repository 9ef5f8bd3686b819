// ZeRO-Offload's optimizer side with the disk as the capacity tier (docs/offload.md):
// this rank's AdamW moments (its shards, laid out as the shard arena: ShardedAdamW's
// m and v) live in two swap files, unit by unit at chunk boundaries
// (offload/swap_layout.h), and the step streams them chunk by chunk: while one chunk is
// updated, the next offload.prefetch chunks are being read and the previous one
// written. With parameter offload (FSDP, offload.params = "disk") the parameter and
// gradient shards stream beside them through the same chunks; otherwise they are read
// where they live in memory. The update of every element is the in-memory one
// (kernels::adamw_update on the same values with the same step constants), so the
// result is bitwise that of ShardedAdamW without offload.
// Communicates: nothing. Writes: the moments' swap files (and the parameters' with
// parameter offload), every chunk once per step; reads them once per step.
// Memory: resident only during the step, (prefetch + 2) x offload.chunk_mb per streamed
// file (2, or 4 with parameter offload); on disk 8 bytes per padded shard element, each
// unit rounded up to whole chunks.
#pragma once

#include "kernels/kernels.h"
#include "offload/swap_space.h"

#include <functional>
#include <memory>
#include <vector>

namespace ndt {

// Elements [begin, end) of the shard arena a step updates with one parameter's constants
// (its owned rows; padding is never updated).
struct AdamWSegment {
  size_t param = 0;
  int64_t begin = 0, end = 0;
  float weight_decay = 0;
};

class OffloadedMoments {
 public:
  OffloadedMoments(offload::SwapSpace& space, offload::SwapLayout layout);

  const offload::SwapLayout& layout() const { return layout_; }
  offload::SwapFile& exp_avg() { return *m_; }
  offload::SwapFile& exp_avg_sq() { return *v_; }

  // Where the step finds parameters and gradients: in memory (owned_rows(p): parameter
  // p's owned rows; grad_shards: the shard arena), or streamed from swap files.
  struct Sources {
    std::function<float*(size_t p)> owned_rows;
    const float* grad_shards = nullptr;
    offload::SwapFile* params = nullptr;
    offload::SwapFile* grads = nullptr;
  };
  // One AdamW update of every segment with `step` (its weight_decay replaced by each
  // segment's). Throws offload::SwapError on an I/O failure or a damaged chunk.
  void step(const std::vector<AdamWSegment>& segments, const Sources& sources, kernels::AdamWStep step);

 private:
  offload::SwapSpace& space_;
  offload::SwapLayout layout_;
  std::unique_ptr<offload::SwapFile> m_, v_;
};

}  // namespace ndt
