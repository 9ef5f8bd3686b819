#include "checkpoint/box.h"

#include "core/error.h"

#include <algorithm>
#include <cstring>

namespace ndt::ckpt {

int64_t box_numel(const Box& box) { return shape_numel(box.shape); }

std::string box_str(const Box& box) {
  return fmt::format("offset {} shape {}", shape_str(box.offset), shape_str(box.shape));
}

std::optional<Box> intersect(const Box& a, const Box& b) {
  NDT_CHECK(a.shape.size() == b.shape.size(), "cannot intersect boxes with {} and {} dims",
            a.shape.size(), b.shape.size());
  Box out{Shape(a.shape.size()), Shape(a.shape.size())};
  for (size_t d = 0; d < a.shape.size(); ++d) {
    const int64_t lo = std::max(a.offset[d], b.offset[d]);
    const int64_t hi = std::min(a.offset[d] + a.shape[d], b.offset[d] + b.shape[d]);
    if (hi <= lo) return std::nullopt;
    out.offset[d] = lo;
    out.shape[d] = hi - lo;
  }
  return out;
}

bool contains(const Box& outer, const Box& inner) {
  if (inner.offset.size() != outer.offset.size() || inner.shape.size() != outer.shape.size()) {
    return false;
  }
  for (size_t d = 0; d < outer.shape.size(); ++d) {
    if (inner.shape[d] < 0 || inner.offset[d] < outer.offset[d] ||
        inner.offset[d] + inner.shape[d] > outer.offset[d] + outer.shape[d]) {
      return false;
    }
  }
  return true;
}

int64_t linear_index(const Box& box, const Shape& point) {
  int64_t index = 0;
  for (size_t d = 0; d < box.shape.size(); ++d) {
    index = index * box.shape[d] + (point[d] - box.offset[d]);
  }
  return index;
}

void copy_region(const Box& region, const float* src, const Box& src_box, int64_t src_first,
                 float* dst, const Box& dst_box) {
  const int64_t total = box_numel(region);
  if (total == 0) return;
  // Contiguous runs along the last dim; an odometer walks the other dims.
  const size_t dims = region.shape.size();
  const int64_t run = dims == 0 ? 1 : region.shape[dims - 1];
  Shape point = region.offset;
  for (int64_t done = 0; done < total; done += run) {
    std::memcpy(dst + linear_index(dst_box, point),
                src + (linear_index(src_box, point) - src_first), run * sizeof(float));
    for (size_t d = dims > 0 ? dims - 1 : 0; d-- > 0;) {
      if (++point[d] < region.offset[d] + region.shape[d]) break;
      point[d] = region.offset[d];
    }
  }
}

}  // namespace ndt::ckpt
