// Learning-rate schedule: linear warmup from 0 to max_lr over warmup_steps, then
// cosine decay to the floor min_lr_ratio * max_lr at decay_steps, flat after.
#pragma once

#include <cstdint>

namespace ndt {

struct LrSchedule {
  float max_lr = 6e-4f;
  float min_lr_ratio = 0.1f;
  int64_t warmup_steps = 0;
  int64_t decay_steps = 1;  // step at which the floor is reached (usually the run length)

  void validate() const;  // throws naming the setting
  float at(int64_t step) const;  // step is 0-based
};

}  // namespace ndt
