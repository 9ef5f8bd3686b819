#include "optim/clip.h"

#include "core/error.h"

#include <algorithm>
#include <vector>

namespace ndt {

std::string_view clip_mode_name(ClipMode mode) { return mode == ClipMode::zclip ? "zclip" : "norm"; }

ClipMode clip_mode_from_name(std::string_view name) {
  if (name == "norm") return ClipMode::norm;
  if (name == "zclip") return ClipMode::zclip;
  fail("optim.clip_mode = \"{}\" is not a clip mode: norm or zclip", name);
}

double sum_of_squares(const float* g, int64_t n) {
  // Fixed chunks summed in order: the result does not depend on thread timing, so
  // two identical runs clip identically.
  constexpr int64_t kChunk = kSquaresChunk;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    partial[c] = accumulate_squares(0.0, g + c * kChunk, std::min(n, (c + 1) * kChunk) - c * kChunk);
  }
  double sum = 0;
  for (double s : partial) sum += s;
  return sum;
}

void SquaresFold::add(const float* g, int64_t n) {
  while (n > 0) {
    const int64_t take = std::min(n, kSquaresChunk - in_chunk_);
    partial_ = accumulate_squares(partial_, g, take);
    g += take;
    n -= take;
    in_chunk_ += take;
    if (in_chunk_ == kSquaresChunk) {
      sum_ += partial_;
      partial_ = 0;
      in_chunk_ = 0;
    }
  }
}

float clip_factor(double norm, float max_norm) {
  if (max_norm <= 0 || norm <= max_norm) return 1.0f;
  return static_cast<float>(max_norm / (norm + 1e-6));
}

}  // namespace ndt
