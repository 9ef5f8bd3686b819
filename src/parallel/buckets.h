// Gradient buckets shared by data parallelism and ZeRO: consecutive parameters grouped
// from the end of the arena (the order in which backward finishes gradients) until a
// bucket holds at least bucket_bytes; the last bucket takes what is left.
#pragma once

#include "model/parameter.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ndt {

struct GradientBucket {
  size_t first_param = 0;  // parameters [first_param, end_param)
  size_t end_param = 0;
  int64_t begin = 0;  // elements [begin, end) of the full-layout arena
  int64_t end = 0;
};

std::vector<GradientBucket> make_gradient_buckets(const ParameterStore& store, size_t bucket_bytes);

}  // namespace ndt
