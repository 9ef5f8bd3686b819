// A box of training state a rank holds, as the data-parallel layouts describe it for
// checkpoints (train/checkpointing.h): which rows of which parameter, as its value or
// one of its AdamW moments, whether this rank is the one that writes it, and where its
// values are: in memory, or in a swap file (offload, docs/offload.md), read and written
// through the slice in either case.
#pragma once

#include "model/parameter.h"
#include "offload/swap_file.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ndt {

// A box of training state this rank holds, for checkpoints: rows [row_begin, row_end)
// (dim 0) of this rank's tensor-parallel block of a parameter, as its value or one of
// its AdamW moments, contiguous at data (or, offloaded, in `swap` from element
// swap_element on). saved: this rank writes it (state replicated over ranks is written
// by one of them); every rank reads all of its slices on load.
struct StateSlice {
  enum Kind { value, exp_avg, exp_avg_sq };
  Kind kind;
  const Parameter* param;
  int64_t row_begin, row_end;
  float* data;  // null when the slice is on disk
  bool saved;
  offload::SwapFile* swap = nullptr;
  int64_t swap_element = 0;
  bool on_disk() const { return swap != nullptr; }
  int64_t numel() const;
  // Elements [first, first + count) of the slice, wherever they live (a swap file: read
  // and written synchronously, whole chunks verified; while the file restores, its copy).
  void read(int64_t first, int64_t count, float* out) const;
  void write(int64_t first, int64_t count, const float* in) const;
  // The checkpoint's tensor name: the parameter's, or "optim.exp_avg.<name>" / "optim.exp_avg_sq.<name>".
  std::string tensor_name() const;
  // The box in the logical tensor.
  Shape offset() const;
  Shape shape() const;
};

// Which of `ranks` ranks writes each parameter when whole parameters are replicated
// over them: balanced by size, largest first to the rank with the fewest elements so
// far (ties: the lowest rank). By index alone (i mod ranks) rank 0 of two got every
// weight matrix and rank 1 every bias: 98% of the bytes.
std::vector<int> balanced_writers(const std::vector<Parameter>& params, int ranks);

}  // namespace ndt
