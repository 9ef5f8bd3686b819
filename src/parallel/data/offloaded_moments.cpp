#include "parallel/data/offloaded_moments.h"

#include "core/error.h"
#include "offload/chunk_stream.h"

#include <algorithm>

namespace ndt {

OffloadedMoments::OffloadedMoments(offload::SwapSpace& space, offload::SwapLayout layout)
    : space_(space), layout_(std::move(layout)) {
  m_ = space.create("exp_avg", layout_.chunks(), MemTag::optimizer);
  v_ = space.create("exp_avg_sq", layout_.chunks(), MemTag::optimizer);
}

namespace {

// The kernels on one thread while it lives. The update of a chunk is a millisecond of
// memory-bound work: forking the thread team for each one cost more than the work on a
// loaded 2-core machine (0.46 s against 0.06 s per 124M elements measured: a fork waits
// for a worker the I/O and other processes keep off its core). The elementwise AdamW
// gives the same bits on any number of threads.
class OneThread {
 public:
  OneThread() : threads_(kernels::num_threads()) { kernels::set_num_threads(1); }
  ~OneThread() { kernels::set_num_threads(threads_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int threads_;
};

}  // namespace

void OffloadedMoments::step(const std::vector<AdamWSegment>& segments, const Sources& sources,
                            kernels::AdamWStep step) {
  const OneThread serial;
  NDT_CHECK((sources.params != nullptr) == (sources.grads != nullptr) && (sources.params || sources.grad_shards),
            "offload: a step needs parameters and gradients either both in memory or both on disk");
  std::vector<offload::StreamedFile> files = {{m_.get(), true, MemTag::optimizer}, {v_.get(), true, MemTag::optimizer}};
  if (sources.params) {
    files.push_back({sources.params, true, MemTag::params});
    files.push_back({sources.grads, false, MemTag::grads});
  }
  // Segments and chunks both run in arena order: one cursor walks the segments.
  size_t first = 0;
  offload::stream_chunks(layout_, files, space_.options().prefetch,
                         [&](int64_t, int64_t begin, int64_t end, float* const* values) {
                           while (first < segments.size() && segments[first].end <= begin) ++first;
                           for (size_t i = first; i < segments.size() && segments[i].begin < end; ++i) {
                             const AdamWSegment& s = segments[i];
                             const int64_t lo = std::max(s.begin, begin), hi = std::min(s.end, end);
                             if (lo >= hi) continue;
                             float* param = sources.params ? values[2] + (lo - begin)
                                                           : sources.owned_rows(s.param) + (lo - s.begin);
                             const float* grad = sources.params ? values[3] + (lo - begin) : sources.grad_shards + lo;
                             step.weight_decay = s.weight_decay;
                             kernels::adamw_update(param, grad, values[0] + (lo - begin), values[1] + (lo - begin),
                                                   hi - lo, step);
                           }
                         });
}

}  // namespace ndt
