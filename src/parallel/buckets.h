// Gradient buckets shared by data parallelism (DDP) and ZeRO stage 1: consecutive
// parameters grouped from the end of the arena (the order in which backward finishes
// gradients) until a bucket holds at least bucket_bytes; the last bucket takes what is
// left. BucketScheduler starts each bucket's communication as soon as backward has
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
  int64_t begin = 0;  // elements [begin, end) of the full-layout arena
  int64_t end = 0;
};

std::vector<GradientBucket> make_gradient_buckets(const ParameterStore& store, size_t bucket_bytes);

class BucketScheduler {
 public:
  // launch(b) starts bucket b's communication; completed(b) runs once it is done (to free
  // what launch staged).
  BucketScheduler(std::vector<GradientBucket> buckets, std::function<WorkHandle(size_t)> launch,
                  std::function<void(size_t)> completed);

  // Before a micro-step's backward; sync = false (no_sync) launches nothing.
  void begin(bool sync);
  // Backward has finished every gradient at arena offsets >= arena_offset: launch the
  // buckets that lie there.
  void grads_ready_from(int64_t arena_offset);
  void poll();
  // Launches what is left and waits for every bucket, in order.
  void wait_all();

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  bool syncing() const { return sync_; }

 private:
  void complete(size_t bucket);

  std::vector<GradientBucket> buckets_;
  std::function<WorkHandle(size_t)> launch_;
  std::function<void(size_t)> completed_;
  std::vector<WorkHandle> in_flight_;  // one slot per bucket
  size_t next_ = 0;                    // buckets [0, next) have been launched
  bool sync_ = true;
};

}  // namespace ndt
