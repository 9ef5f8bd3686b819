// Data parallel (DDP).
// Splits: the global batch across the "dp" mesh axis; parameters are replicated.
// Communicates: gradients, summed by all-reduce in buckets of the gradient arena,
// each started as soon as backward has written its last gradient and overlapped with
// the rest of backward; nothing on no_sync micro-steps (gradient accumulation).
//
// The loss is scaled by 1 / (tokens of the global batch) on every rank, so the sum
// over ranks is the global mean: the same gradient one rank would compute on the
// whole batch, up to the order of float additions.
#pragma once

#include "comm/communicator.h"
#include "model/parameter.h"
#include "model/transformer.h"

#include <cstdint>
#include <vector>

namespace ndt {

class DataParallel : public BackwardObserver {
 public:
  // A bucket is a range [begin, end) of the gradient arena holding whole parameters,
  // at least bucket_bytes (except the last); buckets run from the end of the arena,
  // the order in which backward finishes gradients.
  struct Bucket {
    int64_t begin = 0;
    int64_t end = 0;
  };

  DataParallel(ParameterStore& store, Communicator& dp, size_t bucket_bytes);

  // Before each micro-step's backward. sync = false is no_sync: gradients accumulate
  // locally and nothing is communicated.
  void begin_backward(bool sync);
  void grads_ready_from(int64_t arena_offset) override;
  void poll() override;
  // After backward: starts any bucket not yet started and waits for all of them.
  void finish_backward();

  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Seconds spent in finish_backward() waiting for communication, summed over calls:
  // the all-reduce time backward did not hide.
  double exposed_wait_seconds() const { return exposed_wait_seconds_; }

 private:
  void launch(size_t bucket);

  ParameterStore& store_;
  Communicator& dp_;
  std::vector<Bucket> buckets_;
  std::vector<WorkHandle> in_flight_;  // one slot per bucket
  size_t next_bucket_ = 0;             // buckets [0, next) have been launched
  bool sync_ = true;
  double exposed_wait_seconds_ = 0;
};

}  // namespace ndt
