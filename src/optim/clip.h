// Global-norm gradient clipping. The norm is accumulated in double; with sharded
// gradients each rank contributes the squares of the elements it owns and the sums
// are added across ranks before the square root.
#pragma once

#include <cstdint>

namespace ndt {

double sum_of_squares(const float* g, int64_t n);

// Factor to multiply gradients by so their norm is at most max_norm (1 when
// max_norm <= 0 disables clipping, or when the norm is already small enough).
float clip_factor(double norm, float max_norm);

}  // namespace ndt
