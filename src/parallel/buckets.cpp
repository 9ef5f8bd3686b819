#include "parallel/buckets.h"

#include "core/error.h"

namespace ndt {

std::vector<GradientBucket> make_gradient_buckets(const ParameterStore& store, size_t bucket_bytes) {
  NDT_CHECK(bucket_bytes > 0, "parallel.bucket_mb must be positive");
  const auto& params = store.params();
  std::vector<GradientBucket> buckets;
  size_t end_param = params.size();
  for (size_t p = params.size(); p-- > 0;) {
    const int64_t end = end_param == params.size() ? store.numel() : params[end_param].arena_offset;
    const int64_t begin = params[p].arena_offset;
    if (static_cast<size_t>(end - begin) * sizeof(float) >= bucket_bytes || p == 0) {
      buckets.push_back({p, end_param, begin, end});
      end_param = p;
    }
  }
  return buckets;
}

}  // namespace ndt
