// ZeRO-Infinity's parameter and gradient offload for FSDP (stage 3 with offload.params =
// "disk", docs/offload.md): this rank's parameter shards (the fp32 master copy) and
// gradient shards live in two swap files laid out as the optimizer's moments (unit by
// unit at chunk boundaries, offload/swap_layout.h), so the optimizer step streams all
// four together. An FSDP group's parameter shards are read ahead of its all-gather
// (offload.prefetch units ahead in the order the units run) and freed once packed for
// the gather. Its gradient shards are summed in a buffer (zeros, or read back when a
// micro-step accumulates onto an earlier one) and written when its reduce-scatter is
// folded in; a group's write waits for the previous group's first, so at most two
// groups' gradients are in memory.
// Communicates: nothing. Reads: a group's parameter chunks before each of its gathers
// (forward, and backward again for a block resharded after forward); gradient chunks
// only to accumulate. Writes: every gradient chunk once per micro-step; the parameter
// file at initialisation (the optimizer step rewrites it).
// Memory (resident): the parameter shards of the groups read ahead and not yet gathered
// (at most prefetch + 1 groups), two groups' gradient shards, each rounded up to whole
// chunks. On disk: 4 bytes per padded shard element per file, units rounded up to chunks.
#pragma once

#include "offload/io_buffer.h"
#include "offload/swap_space.h"

#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace ndt {

class OffloadedShards {
 public:
  // group_units[g]: the units of FSDP group g (each in one group).
  OffloadedShards(offload::SwapSpace& space, const offload::SwapLayout& layout,
                  const std::vector<std::vector<int>>& group_units);
  ~OffloadedShards();  // waits for transfers in flight before their buffers go

  offload::SwapFile& params() { return *params_; }
  offload::SwapFile& grads() { return *grads_; }
  const offload::SwapLayout& layout() const { return layout_; }

  // Writes every unit's parameter shards: fill(unit, values) fills a zeroed buffer whose
  // element 0 is the unit's first shard-arena element. Synchronous, one unit at a time.
  void initialise(const std::function<void(int unit, float* values)>& fill);

  // Parameter shards. read_ahead starts reading group g's (nothing when they are resident,
  // in flight or the group holds nothing here); wait makes them resident (reading now if
  // needed); shard() is shard-arena element a of one of its units; release frees them.
  void read_ahead(size_t g);
  void wait(size_t g);
  const float* shard(size_t g, int64_t arena_offset) const;
  void release(size_t g);

  // Gradient shards. begin_step(): every group's start at zero (zero_grads). grad(g, a)
  // makes group g's buffer resident (zeros, or its values so far this step) and returns
  // element a; write_grads(g) writes and frees it (after the previous group's write);
  // finish_writes() waits for the last write and writes zeros for every group nothing
  // was written to this step, so the file holds this step's gradients throughout.
  void begin_step();
  float* grad(size_t g, int64_t arena_offset);
  void write_grads(size_t g);
  void finish_writes();

 private:
  struct Resident {
    offload::IoBuffer buffer;
    std::vector<offload::SwapFile::Pending> pending;
  };
  int64_t position(size_t g, int64_t arena_offset) const;  // in the group's buffer, elements
  void start(offload::SwapFile& file, size_t g, Resident& r, bool write);
  void finish(offload::SwapFile& file, Resident& r);
  void abandon(offload::SwapFile& file, Resident& r) noexcept;

  offload::SwapLayout layout_;
  std::unique_ptr<offload::SwapFile> params_, grads_;
  std::vector<std::vector<int>> units_;  // of each group, with chunks here
  std::vector<int64_t> chunks_;          // of each group
  std::vector<std::optional<Resident>> param_reads_, grad_buffers_;
  std::vector<char> grads_written_;      // this step
  std::optional<size_t> writing_;        // the group whose gradient write is in flight
};

}  // namespace ndt
