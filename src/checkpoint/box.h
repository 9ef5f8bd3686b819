// N-d boxes of a logical tensor (an offset and an extent per dim) and the copy of a
// box's elements between row-major buffers. Saved chunks and requested blocks are
// both boxes, so resharding a checkpoint is box intersection plus copy_region, for
// any number of dims and any split. A 0-d box (a scalar) has one element.
#pragma once

#include "core/tensor.h"

#include <cstdint>
#include <optional>
#include <string>

namespace ndt::ckpt {

struct Box {
  Shape offset;
  Shape shape;
};

int64_t box_numel(const Box& box);
std::string box_str(const Box& box);  // "offset [0, 4] shape [2, 4]"

// The common part of two boxes with the same number of dims; nullopt when it is empty.
std::optional<Box> intersect(const Box& a, const Box& b);

// Whether `inner` (same number of dims, no negative extent) lies inside `outer`.
bool contains(const Box& outer, const Box& inner);

// Row-major index, within `box`, of the element at logical coordinates `point`.
int64_t linear_index(const Box& box, const Shape& point);

// Copies the elements of `region` (inside both boxes) from `src` to `dst`, each a
// row-major buffer over its box. `src` may hold only part of its box, starting at the
// element whose index within src_box is src_first.
void copy_region(const Box& region, const float* src, const Box& src_box, int64_t src_first,
                 float* dst, const Box& dst_box);

}  // namespace ndt::ckpt
