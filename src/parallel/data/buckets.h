// Gradient buckets shared by data parallelism (DDP) and ZeRO stage 1: consecutive
// parameters grouped from the end of the arena (the order in which backward finishes
// gradients) until a bucket holds at least bucket_bytes; the last bucket takes what is
// left. Parameters reduced over different communicators (under expert parallelism,
// the experts over edp and the rest over dp_cp) never share a bucket: one ends where
// the communicator changes. BucketScheduler starts each bucket's communication as soon as backward has
// finished its gradients, polls the ones in flight between backward's kernels and
// waits for the rest at the end.
#pragma once

#include "comm/communicator.h"
#include "model/parameter.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace ndt {

struct GradientBucket {
  size_t first_param = 0;  // parameters [first_param, end_param)
  size_t end_param = 0;
  int64_t begin = 0;  // elements [begin, end) of the gradient arena (frozen parameters have none)
  int64_t end = 0;
  Communicator* comm = nullptr;  // what its parameters' gradients are reduced over (DDP)
};

// comms: one per parameter, the communicator its gradient is reduced over (empty: all
// alike, and every bucket's comm null, for a layout that picks its own, as ZeRO-1 does).
std::vector<GradientBucket> make_gradient_buckets(const ParameterStore& store, size_t bucket_bytes,
                                                  const std::vector<Communicator*>& comms = {});

class BucketScheduler {
 public:
  // launch(b) starts bucket b's communication (null: it has none, e.g. a group of one
  // rank); completed(b) runs once it is done (to free what launch staged).
  BucketScheduler(std::vector<GradientBucket> buckets, std::function<WorkHandle(size_t)> launch,
                  std::function<void(size_t)> completed);

  // Before a micro-step's backward; sync = false (no_sync) launches nothing.
  void begin(bool sync);
  // Backward has finished every gradient at gradient-arena offsets >= grad_offset:
  // launch the buckets that lie there.
  void grads_ready_from(int64_t grad_offset);
  void poll();
  // Launches what is left and waits for every bucket, in order.
  void wait_all();

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  bool syncing() const { return sync_; }
  // Buckets launched by grads_ready_from (during backward) and by wait_all (at the
  // end: communication backward did not hide), counted over every micro-step.
  int64_t launched_in_backward() const { return launched_in_backward_; }
  int64_t launched_at_finish() const { return launched_at_finish_; }

 private:
  void complete(size_t bucket);
  void launch_ready(int64_t arena_offset, int64_t& counter);

  std::vector<GradientBucket> buckets_;
  std::function<WorkHandle(size_t)> launch_;
  std::function<void(size_t)> completed_;
  std::vector<WorkHandle> in_flight_;  // one slot per bucket
  size_t next_ = 0;                    // buckets [0, next) have been launched
  bool sync_ = true;
  int64_t launched_in_backward_ = 0, launched_at_finish_ = 0;
};

}  // namespace ndt
