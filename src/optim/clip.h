// Global-norm gradient clipping. The norm is accumulated in double; with sharded
// gradients each rank contributes the squares of the elements it owns and the sums
// are added across ranks before the square root.
#pragma once

#include <cstdint>
#include <string_view>

namespace ndt {

// optim.clip_mode: clip the global norm to a fixed bound (optim.grad_clip), or ZClip
// (optim/zclip.h). The names are the config's; from_name throws naming the key.
enum class ClipMode { norm, zclip };
std::string_view clip_mode_name(ClipMode mode);
ClipMode clip_mode_from_name(std::string_view name);

// The sum of squares in double: partial sums over consecutive chunks of
// kSquaresChunk elements, each in order, added in order (so the result does not depend
// on threads).
inline constexpr int64_t kSquaresChunk = int64_t{1} << 16;
double sum_of_squares(const float* g, int64_t n);

// s + g[0]^2 + ... + g[n-1]^2 in order: the inner loop of sum_of_squares.
inline double accumulate_squares(double s, const float* g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(g[i]) * g[i];
  return s;
}

// sum_of_squares of a sequence given in pieces (offload streams gradients from disk):
// the same chunks and order, so the same bits as one call on the whole sequence.
class SquaresFold {
 public:
  void add(const float* g, int64_t n);
  double total() const { return in_chunk_ > 0 ? sum_ + partial_ : sum_; }

 private:
  double sum_ = 0, partial_ = 0;
  int64_t in_chunk_ = 0;
};

// Factor to multiply gradients by so their norm is at most max_norm (1 when
// max_norm <= 0 disables clipping, or when the norm is already small enough).
float clip_factor(double norm, float max_norm);

}  // namespace ndt
