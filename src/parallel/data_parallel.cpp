#include "parallel/data_parallel.h"

#include "core/error.h"

#include <chrono>

namespace ndt {

DataParallel::DataParallel(ParameterStore& store, Communicator& dp, size_t bucket_bytes)
    : store_(store), dp_(dp) {
  NDT_CHECK(bucket_bytes > 0, "parallel.bucket_mb must be positive");
  const auto& params = store.params();
  int64_t end = store.numel();
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const int64_t begin = it->arena_offset;
    const bool last_param = std::next(it) == params.rend();
    if (static_cast<size_t>(end - begin) * sizeof(float) >= bucket_bytes || last_param) {
      buckets_.push_back({begin, end});
      end = begin;
    }
  }
  in_flight_.resize(buckets_.size());
}

void DataParallel::begin_backward(bool sync) {
  sync_ = sync;
  next_bucket_ = 0;
}

void DataParallel::launch(size_t b) {
  const Bucket& bucket = buckets_[b];
  float* grads = store_.grads().data<float>() + bucket.begin;
  in_flight_[b] = dp_.iall_reduce(grads, static_cast<size_t>(bucket.end - bucket.begin), DType::f32,
                                  ReduceOp::sum);
}

void DataParallel::grads_ready_from(int64_t arena_offset) {
  if (!sync_ || dp_.size() == 1) return;
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= arena_offset) {
    launch(next_bucket_++);
  }
}

void DataParallel::poll() {
  for (size_t b = 0; b < next_bucket_; ++b) {
    if (in_flight_[b] && in_flight_[b]->test()) in_flight_[b].reset();
  }
}

void DataParallel::finish_backward() {
  if (!sync_ || dp_.size() == 1) return;
  grads_ready_from(0);
  const auto t0 = std::chrono::steady_clock::now();
  for (WorkHandle& work : in_flight_) {
    if (work) work->wait();
    work.reset();
  }
  exposed_wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace ndt
