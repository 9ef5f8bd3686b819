#include "optim/loss_scaler.h"

#include "core/error.h"
#include "model/fp8_scaling.h"

#include <algorithm>
#include <cmath>

namespace ndt {

std::string_view loss_scaling_name(LossScaling mode) {
  switch (mode) {
    case LossScaling::automatic: return "auto";
    case LossScaling::dynamic: return "dynamic";
    case LossScaling::off: return "off";
  }
  return "?";
}

LossScaling loss_scaling_from_name(std::string_view name) {
  for (LossScaling mode : {LossScaling::automatic, LossScaling::dynamic, LossScaling::off}) {
    if (name == loss_scaling_name(mode)) return mode;
  }
  fail("precision.loss_scaling = \"{}\" is not a mode: auto, dynamic or off", name);
}

void LossScalerConfig::validate() const {
  NDT_CHECK(std::isfinite(growth_factor) && growth_factor > 1,
            "precision.loss_scale.growth_factor = {} must be a finite number greater than 1",
            growth_factor);
  NDT_CHECK(backoff_factor > 0 && backoff_factor < 1,
            "precision.loss_scale.backoff_factor = {} must be in (0, 1)", backoff_factor);
  NDT_CHECK(growth_interval >= 1, "precision.loss_scale.growth_interval = {} must be at least 1",
            growth_interval);
  NDT_CHECK(std::isfinite(min_scale) && min_scale > 0,
            "precision.loss_scale.min_scale = {} must be a finite positive number", min_scale);
  NDT_CHECK(std::isfinite(max_scale) && max_scale >= min_scale,
            "precision.loss_scale.max_scale = {} must be finite and at least min_scale = {}",
            max_scale, min_scale);
  NDT_CHECK(initial_scale >= min_scale && initial_scale <= max_scale,
            "precision.loss_scale.initial_scale = {} must be in [min_scale, max_scale] = [{}, {}]",
            initial_scale, min_scale, max_scale);
}

DynamicLossScaler::DynamicLossScaler(const LossScalerConfig& config)
    : config_(config), scale_(config.initial_scale) {
  config_.validate();
}

bool DynamicLossScaler::update(bool found_non_finite) {
  if (found_non_finite) {
    scale_ = std::max(scale_ * config_.backoff_factor, config_.min_scale);
    clean_steps_ = 0;
    ++skipped_;
    return false;
  }
  if (++clean_steps_ == config_.growth_interval) {
    scale_ = std::min(scale_ * config_.growth_factor, config_.max_scale);
    clean_steps_ = 0;
  }
  return true;
}

void DynamicLossScaler::restore(const LossScalerState& state) {
  NDT_CHECK(state.scale >= config_.min_scale && state.scale <= config_.max_scale,
            "loss scale {} in the checkpoint is outside precision.loss_scale.min_scale .. "
            "max_scale = [{}, {}]",
            state.scale, config_.min_scale, config_.max_scale);
  NDT_CHECK(state.clean_steps >= 0 && state.clean_steps < config_.growth_interval,
            "loss scaler clean-step count {} in the checkpoint is outside [0, "
            "precision.loss_scale.growth_interval = {})",
            state.clean_steps, config_.growth_interval);
  NDT_CHECK(state.skipped >= 0, "loss scaler skipped-step count {} in the checkpoint is negative",
            state.skipped);
  scale_ = state.scale;
  clean_steps_ = state.clean_steps;
  skipped_ = state.skipped;
}

// The largest magnitude is inf or NaN exactly when some value is (amax_of propagates NaN).
bool any_non_finite(const float* x, int64_t n) { return !std::isfinite(amax_of(x, n)); }

}  // namespace ndt
