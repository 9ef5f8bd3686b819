#include "parallel/data/buckets.h"

#include "core/error.h"

#include <utility>

namespace ndt {

std::vector<GradientBucket> make_gradient_buckets(const ParameterStore& store, size_t bucket_bytes,
                                                  const std::vector<Communicator*>& comms) {
  NDT_CHECK(bucket_bytes > 0, "parallel.bucket_mb must be positive");
  const auto& params = store.params();
  auto comm = [&](size_t p) { return comms.empty() ? nullptr : comms[p]; };
  std::vector<GradientBucket> buckets;
  // Frozen parameters have no gradients: a bucket holds the trainable ones in
  // [first_param, end_param) and never begins or ends at a frozen one.
  std::vector<size_t> trainable;
  for (size_t p = 0; p < params.size(); ++p) {
    if (params[p].trainable()) trainable.push_back(p);
  }
  size_t end_param = params.size();
  for (size_t k = trainable.size(); k-- > 0;) {
    const size_t p = trainable[k];
    const int64_t end = end_param == params.size() ? store.grad_numel() : params[end_param].grad_offset;
    const int64_t begin = params[p].grad_offset;
    if (static_cast<size_t>(end - begin) * sizeof(float) >= bucket_bytes || k == 0 ||
        comm(trainable[k - 1]) != comm(p)) {
      buckets.push_back({p, end_param, begin, end, comm(p)});
      end_param = p;
    }
  }
  return buckets;
}

BucketScheduler::BucketScheduler(std::vector<GradientBucket> buckets, std::function<WorkHandle(size_t)> launch,
                                 std::function<void(size_t)> completed)
    : buckets_(std::move(buckets)),
      launch_(std::move(launch)),
      completed_(std::move(completed)),
      in_flight_(buckets_.size()) {}

void BucketScheduler::begin(bool sync) {
  sync_ = sync;
  next_ = 0;
}

void BucketScheduler::grads_ready_from(int64_t arena_offset) { launch_ready(arena_offset, launched_in_backward_); }

void BucketScheduler::launch_ready(int64_t arena_offset, int64_t& counter) {
  if (!sync_) return;
  while (next_ < buckets_.size() && buckets_[next_].begin >= arena_offset) {
    in_flight_[next_] = launch_(next_);
    ++next_;
    ++counter;
  }
}

void BucketScheduler::complete(size_t b) {
  in_flight_[b].reset();
  if (completed_) completed_(b);
}

void BucketScheduler::poll() {
  for (size_t b = 0; b < next_; ++b) {
    if (in_flight_[b] && in_flight_[b]->test()) complete(b);
  }
}

void BucketScheduler::wait_all() {
  if (!sync_) return;
  launch_ready(0, launched_at_finish_);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (!in_flight_[b]) continue;
    in_flight_[b]->wait();
    complete(b);
  }
}

}  // namespace ndt
