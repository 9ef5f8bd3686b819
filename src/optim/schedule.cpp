#include "optim/schedule.h"

#include "core/error.h"

#include <cmath>

namespace ndt {

void LrSchedule::validate() const {
  NDT_CHECK(max_lr > 0, "optim.lr = {} must be positive", max_lr);
  NDT_CHECK(min_lr_ratio >= 0 && min_lr_ratio <= 1, "optim.min_lr_ratio = {} must be in [0, 1]",
            min_lr_ratio);
  NDT_CHECK(warmup_steps >= 0, "optim.warmup_steps = {} must not be negative", warmup_steps);
  NDT_CHECK(decay_steps >= 0, "optim.decay_steps = {} must not be negative", decay_steps);
}

float LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return max_lr * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
  const float min_lr = max_lr * min_lr_ratio;
  if (step >= decay_steps || decay_steps <= warmup_steps) return min_lr;
  const double progress =
      static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps - warmup_steps);
  return min_lr + 0.5f * (max_lr - min_lr) * static_cast<float>(1.0 + std::cos(M_PI * progress));
}

}  // namespace ndt
