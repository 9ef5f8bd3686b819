// Checkpoint test helpers: whole logical tensors with distinct values, the blocks of
// them a rank would save (cut with plain index arithmetic, independent of box.h), and
// one standard two-rank checkpoint that the tests save, read and damage.
#pragma once

#include "checkpoint/checkpoint.h"
#include "checkpoint/commit.h"
#include "checkpoint/directory.h"
#include "checkpoint/writer.h"

#include <filesystem>
#include <string>
#include <vector>

namespace ndt::testing {

struct FullTensor {
  std::string name;
  Shape shape;
  std::vector<float> values;  // row-major
};

// Values start + 0.25 * i: distinct and exact in f32.
inline FullTensor make_tensor(const std::string& name, const Shape& shape, float start) {
  FullTensor t{name, shape, std::vector<float>(static_cast<size_t>(shape_numel(shape)))};
  for (size_t i = 0; i < t.values.size(); ++i) t.values[i] = start + 0.25f * static_cast<float>(i);
  return t;
}

// The elements of the box (offset, shape) of t, row-major.
inline std::vector<float> slice(const FullTensor& t, const Shape& offset, const Shape& shape) {
  std::vector<float> out(static_cast<size_t>(shape_numel(shape)));
  for (int64_t e = 0; e < static_cast<int64_t>(out.size()); ++e) {
    int64_t rest = e;
    int64_t index = 0;
    int64_t stride = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      index += (offset[d] + rest % shape[d]) * stride;
      rest /= shape[d];
      stride *= t.shape[d];
    }
    out[static_cast<size_t>(e)] = t.values[static_cast<size_t>(index)];
  }
  return out;
}

inline ckpt::TensorBlock block_of(const FullTensor& t, const Shape& offset, const Shape& shape) {
  return ckpt::TensorBlock{t.name, t.shape, offset, shape, slice(t, offset, shape)};
}

// The tensors of the standard checkpoint and how two ranks split them:
// w [6, 8] by rows 3 + 3; v [4, 6] by columns 2 + 4; t3 [3, 4, 5] along dim 2, 2 + 3;
// b [10] as 4 + 6; ln [5] (replicated) and scale [] written by rank 0 only;
// e [4, 3] all on rank 0, with an empty block on rank 1.
struct Standard {
  FullTensor w = make_tensor("w", {6, 8}, 1.0f);
  FullTensor v = make_tensor("v", {4, 6}, -3.0f);
  FullTensor t3 = make_tensor("t3", {3, 4, 5}, 100.0f);
  FullTensor b = make_tensor("b", {10}, 0.5f);
  FullTensor ln = make_tensor("ln", {5}, 7.0f);
  FullTensor scale = make_tensor("scale", {}, 42.0f);
  FullTensor e = make_tensor("e", {4, 3}, -50.0f);

  std::vector<ckpt::TensorBlock> rank_blocks(int rank) const {
    if (rank == 0) {
      return {block_of(w, {0, 0}, {3, 8}),    block_of(v, {0, 0}, {4, 2}),
              block_of(t3, {0, 0, 0}, {3, 4, 2}), block_of(b, {0}, {4}),
              block_of(ln, {0}, {5}),         block_of(scale, {}, {}),
              block_of(e, {0, 0}, {4, 3})};
    }
    return {block_of(w, {3, 0}, {3, 8}), block_of(v, {0, 2}, {4, 4}),
            block_of(t3, {0, 0, 2}, {3, 4, 3}), block_of(b, {4}, {6}),
            block_of(e, {4, 0}, {0, 3})};
  }

  // Writes both ranks into <root>/step-N.tmp and commits it; returns the final directory.
  std::filesystem::path save(const std::filesystem::path& root, int64_t step) const {
    const std::filesystem::path tmp = ckpt::make_tmp_checkpoint_dir(root, step);
    for (int rank = 0; rank < 2; ++rank) ckpt::write_rank_file(tmp, rank, rank_blocks(rank));
    const std::filesystem::path final_dir = root / ckpt::checkpoint_dir_name(step);
    ckpt::commit_checkpoint(tmp, final_dir, 2, {{"step", step}});
    return final_dir;
  }
};

}  // namespace ndt::testing
