#include "optim/zclip.h"

#include "core/error.h"

#include <climits>
#include <cmath>

namespace ndt {

void ZClipConfig::validate() const {
  NDT_CHECK(std::isfinite(alpha) && alpha > 0 && alpha < 1,
            "optim.zclip_alpha = {} must be in (0, 1)", alpha);
  NDT_CHECK(std::isfinite(threshold) && threshold > 0,
            "optim.zclip_threshold = {} must be a finite positive number", threshold);
  NDT_CHECK(warmup_steps >= 1, "optim.zclip_warmup = {} must be at least 1", warmup_steps);
  NDT_CHECK(std::isfinite(eps) && eps > 0, "optim.zclip_eps = {} must be a finite positive number",
            eps);
}

ZClip::ZClip(const ZClipConfig& config) : config_(config) { config_.validate(); }

double ZClip::variance() const {
  if (warmed_up_) return m2_or_var_;
  return steps_ == 0 ? 0.0 : m2_or_var_ / steps_;
}

ZClip::Decision ZClip::update(double norm) {
  NDT_CHECK(std::isfinite(norm) && norm >= 0,
            "ZClip: gradient norm {} must be finite and non-negative (a step with a non-finite "
            "gradient is skipped before ZClip::update)",
            norm);
  if (steps_ < INT_MAX) ++steps_;  // saturates rather than overflow; 2^31 steps never happen

  if (!warmed_up_) {
    // Welford: the running mean and sum of squared deviations of the first n norms.
    const double delta = norm - mean_;
    mean_ += delta / steps_;
    m2_or_var_ += delta * (norm - mean_);
    if (steps_ >= config_.warmup_steps) {
      m2_or_var_ /= steps_;  // M2 -> population variance
      warmed_up_ = true;
    }
    return {false, norm, norm, 0.0};
  }

  const double std_dev = std::sqrt(m2_or_var_);
  const double z = (norm - mean_) / (std_dev + config_.eps);
  const bool clipped = z > config_.threshold;
  const double target = clipped ? mean_ + config_.threshold * std_dev : norm;

  const double keep = 1 - config_.alpha;
  mean_ += keep * (target - mean_);
  const double dev = target - mean_;  // from the updated mean
  m2_or_var_ = config_.alpha * m2_or_var_ + keep * (dev * dev);
  return {clipped, norm, target, z};
}

std::vector<double> ZClip::state() const {
  return {static_cast<double>(steps_), warmed_up_ ? 1.0 : 0.0, mean_, m2_or_var_};
}

void ZClip::restore(const std::vector<double>& state) {
  NDT_CHECK(state.size() == kStateSize,
            "ZClip state in the checkpoint has {} numbers, expected {} (steps, warmed-up flag, "
            "mean, M2 or variance)",
            state.size(), kStateSize);
  for (size_t i = 0; i < state.size(); ++i) {
    NDT_CHECK(std::isfinite(state[i]), "ZClip state in the checkpoint: number {} is {}, not finite",
              i, state[i]);
  }
  const double steps = state[0], flag = state[1], mean = state[2], second = state[3];
  NDT_CHECK(steps >= 0 && steps <= INT_MAX && std::floor(steps) == steps,
            "ZClip step count {} in the checkpoint is not a whole number in [0, {}]", steps,
            INT_MAX);
  NDT_CHECK(flag == 0 || flag == 1, "ZClip warmed-up flag {} in the checkpoint is neither 0 nor 1",
            flag);
  NDT_CHECK(mean >= 0, "ZClip mean {} in the checkpoint is negative", mean);
  NDT_CHECK(second >= 0, "ZClip {} {} in the checkpoint is negative",
            flag == 1 ? "variance" : "sum of squared deviations", second);
  const int n = static_cast<int>(steps);
  if (flag == 0) {
    NDT_CHECK(n < config_.warmup_steps,
              "ZClip state in the checkpoint is in warm-up with {} norms seen, but "
              "optim.zclip_warmup = {} ends warm-up at that many",
              n, config_.warmup_steps);
    NDT_CHECK(n > 0 || (mean == 0 && second == 0),
              "ZClip state in the checkpoint has no norms seen but mean {} and M2 {} (expected 0)",
              mean, second);
  } else {
    NDT_CHECK(n >= 1, "ZClip state in the checkpoint is past warm-up with no norms seen");
  }
  steps_ = n;
  warmed_up_ = flag == 1;
  mean_ = mean;
  m2_or_var_ = second;
}

}  // namespace ndt
