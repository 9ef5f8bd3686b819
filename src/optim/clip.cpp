#include "optim/clip.h"

#include "core/error.h"
#include "kernels/profile.h"

#include <algorithm>
#include <vector>

namespace ndt {

std::string_view clip_mode_name(ClipMode mode) { return mode == ClipMode::zclip ? "zclip" : "norm"; }

ClipMode clip_mode_from_name(std::string_view name) {
  if (name == "norm") return ClipMode::norm;
  if (name == "zclip") return ClipMode::zclip;
  fail("optim.clip_mode = \"{}\" is not a clip mode: norm or zclip", name);
}

void SquareLanes::add(const float* g, int64_t n, int64_t first) {
  double lanes[kSquareLanes];
  std::copy(lanes_, lanes_ + kSquareLanes, lanes);
  int64_t i = 0;
  // Up to the next position of lane 0, then whole rows of lanes, then the rest.
  const int head = static_cast<int>(first % kSquareLanes);
  for (int lane = head; head != 0 && lane < kSquareLanes && i < n; ++lane, ++i) {
    lanes[lane] += static_cast<double>(g[i]) * g[i];
  }
  for (; i + kSquareLanes <= n; i += kSquareLanes) {
    for (int j = 0; j < kSquareLanes; ++j) lanes[j] += static_cast<double>(g[i + j]) * g[i + j];
  }
  for (int j = 0; i < n; ++i, ++j) lanes[j] += static_cast<double>(g[i]) * g[i];
  std::copy(lanes, lanes + kSquareLanes, lanes_);
}

double SquareLanes::total() const {
  double sum = 0;
  for (double lane : lanes_) sum += lane;
  return sum;
}

double sum_of_squares(const float* g, int64_t n) {
  const kernels::ProfileScope scope(kernels::OpClass::optimizer);  // the clip's norm, beside AdamW
  constexpr int64_t kChunk = kSquaresChunk;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    SquareLanes lanes;
    lanes.add(g + c * kChunk, std::min(n, (c + 1) * kChunk) - c * kChunk, 0);
    partial[c] = lanes.total();
  }
  double sum = 0;
  for (double s : partial) sum += s;
  return sum;
}

void SquaresFold::add(const float* g, int64_t n) {
  while (n > 0) {
    const int64_t take = std::min(n, kSquaresChunk - in_chunk_);
    chunk_.add(g, take, in_chunk_);
    g += take;
    n -= take;
    in_chunk_ += take;
    if (in_chunk_ == kSquaresChunk) {
      sum_ += chunk_.total();
      chunk_ = SquareLanes();
      in_chunk_ = 0;
    }
  }
}

float clip_factor(double norm, float max_norm) {
  if (max_norm <= 0 || norm <= max_norm) return 1.0f;
  return static_cast<float>(max_norm / (norm + 1e-6));
}

}  // namespace ndt
