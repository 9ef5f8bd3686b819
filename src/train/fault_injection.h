// Fault injection (the [debug] keys): faults put into a run on purpose, to show the
// defences work on any layout (docs/precision.md, docs/stability.md).
//   debug.corrupt_batches = "FIRST:COUNT": training batches FIRST .. FIRST+COUNT-1 (data
//     positions, every rank alike) get random inputs and one target token for the
//     whole batch, a function of (seed, position) alone: every row pulls the same way,
//     so the loss and the gradient norm both jump.
//   debug.nonfinite_gradient_step / _rank: at that 1-based step, after backward, the
//     first gradient element that rank holds becomes +inf, as an fp16 overflow would.
#pragma once

#include "parallel/data/gradient_sync.h"
#include "train/config.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace ndt {

class FaultInjection {
 public:
  // Throws naming debug.nonfinite_gradient_rank when it is not a rank of the job.
  FaultInjection(const RunConfig& config, int world_size);

  // Rows [row_begin, row_begin + rows) of the batch at data position `position`,
  // corrupted in place when it lies in the window.
  void corrupt_rows(int64_t position, int row_begin, int rows, int32_t* inputs, int32_t* targets) const;
  // At 1-based step `step` on world rank `rank`: one reduced gradient element set to
  // +inf; returns the line that says which (nothing when no fault is due).
  std::optional<std::string> corrupt_gradient(int64_t step, int rank, const ParameterStore& store,
                                              GradientSync& sync) const;

 private:
  uint64_t seed_;
  int batch_size_, seq_len_, vocab_size_;
  std::optional<std::pair<int64_t, int64_t>> window_;  // debug.corrupt_batches
  int64_t gradient_step_;
  int gradient_rank_;
};

}  // namespace ndt
