#include "parallel/pipeline/seq1f1b.h"

#include <algorithm>

namespace ndt {

std::vector<PipelineAction> seq1f1b_compute(const PipelineShape& shape, int rank) {
  const int k = shape.seq_chunks, units = shape.m * k;
  // Unit i forward: micro-batch i / k, sequence chunk i % k; backward: the same
  // micro-batch with its sequence chunks reversed.
  auto forward = [&](int i) { return PipelineAction{PipelineActionKind::forward, i / k, rank, -1, i % k}; };
  auto backward = [&](int i) {
    return PipelineAction{PipelineActionKind::backward, i / k, rank, -1, k - 1 - i % k};
  };
  const int warmup = std::min(shape.pp - rank - 1 + k - 1, units);
  std::vector<PipelineAction> out;
  for (int i = 0; i < warmup; ++i) out.push_back(forward(i));
  for (int i = 0; i < units - warmup; ++i) {
    out.push_back(forward(warmup + i));
    out.push_back(backward(i));
  }
  for (int i = units - warmup; i < units; ++i) out.push_back(backward(i));
  return out;
}

}  // namespace ndt
