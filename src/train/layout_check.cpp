#include "train/layout_check.h"

#include "core/timing.h"

#include <fmt/format.h>

#include <utility>

namespace ndt {

std::string LayoutCheckResult::describe(int64_t step) const {
  return fmt::format("layout check after step {}: {} measured {:.4g} s per step (median of {}) against {:.4g} s "
                     "predicted ({:+.1f}%)",
                     step, predicted.layout, measured_step_s, steps, predicted.step_s, 100 * error());
}

LayoutCheck::LayoutCheck(LayoutPrediction prediction, int64_t check_steps)
    : prediction_(std::move(prediction)), check_steps_(check_steps) {}

std::optional<LayoutCheckResult> LayoutCheck::observe(int64_t step, double seconds, bool last) {
  if (done_) return std::nullopt;
  if (step > 0 || last) seconds_.push_back(seconds);
  if (static_cast<int64_t>(seconds_.size()) < check_steps_ && !last) return std::nullopt;
  done_ = true;
  return LayoutCheckResult{prediction_, median(seconds_), static_cast<int>(seconds_.size())};
}

}  // namespace ndt
