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
// kSquaresChunk elements (SquareLanes each), added in order, so the result does not
// depend on threads.
inline constexpr int64_t kSquaresChunk = int64_t{1} << 16;
double sum_of_squares(const float* g, int64_t n);

// One chunk's squares in kSquareLanes running double sums by position: the element at
// chunk position i goes to lane i % kSquareLanes, each lane in order, and total() adds the
// lanes in order. The positions alone fix every addition, so a chunk given in pieces sums
// to the bits of the whole on any instruction set, and the lanes vectorise (one running
// sum is a chain of dependent adds: about 3x slower over gpt2-124m's gradients). Each
// square is exact in double.
inline constexpr int kSquareLanes = 32;
class SquareLanes {
 public:
  // Adds the squares of g[0, n), the elements at chunk positions first, first + 1, ...
  void add(const float* g, int64_t n, int64_t first);
  double total() const;

 private:
  double lanes_[kSquareLanes] = {};
};

// sum_of_squares of a sequence given in pieces (offload streams gradients from disk):
// the same chunks and lanes, so the same bits as one call on the whole sequence.
class SquaresFold {
 public:
  void add(const float* g, int64_t n);
  double total() const { return in_chunk_ > 0 ? sum_ + chunk_.total() : sum_; }

 private:
  double sum_ = 0;
  SquareLanes chunk_;
  int64_t in_chunk_ = 0;
};

// Factor to multiply gradients by so their norm is at most max_norm (1 when
// max_norm <= 0 disables clipping, or when the norm is already small enough).
float clip_factor(double norm, float max_norm);

}  // namespace ndt
