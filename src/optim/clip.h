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

double sum_of_squares(const float* g, int64_t n);

// Factor to multiply gradients by so their norm is at most max_norm (1 when
// max_norm <= 0 disables clipping, or when the norm is already small enough).
float clip_factor(double norm, float max_norm);

}  // namespace ndt
