// A box of training state a rank holds, as the data-parallel layouts describe it for
// checkpoints (train/checkpointing.h): which rows of which parameter, as its value or
// one of its AdamW moments, and whether this rank is the one that writes it.
#pragma once

#include "model/parameter.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ndt {

// A box of training state this rank holds, for checkpoints: rows [row_begin, row_end)
// (dim 0) of this rank's tensor-parallel block of a parameter, as its value or one of
// its AdamW moments, contiguous at data. saved: this rank writes it (state replicated
// over ranks is written by one of them); every rank reads all of its slices on load.
struct StateSlice {
  enum Kind { value, exp_avg, exp_avg_sq };
  Kind kind;
  const Parameter* param;
  int64_t row_begin, row_end;
  float* data;
  bool saved;
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
