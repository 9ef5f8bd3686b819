#include "train/spike_detector.h"

#include "core/error.h"

#include <fmt/format.h>

#include <cmath>

namespace ndt {

void SpikeDetectorConfig::validate() const {
  NDT_CHECK(window >= 2, "stability.spike_window = {} must be at least 2", window);
  NDT_CHECK(min_samples >= 2 && min_samples <= window,
            "stability.spike_min_samples = {} must lie in [2, stability.spike_window = {}]", min_samples, window);
  NDT_CHECK(std::isfinite(zscore) && zscore > 0, "stability.spike_zscore = {} must be positive", zscore);
  NDT_CHECK(std::isfinite(min_increase) && min_increase >= 0, "stability.spike_min_increase = {} must not be negative",
            min_increase);
  NDT_CHECK(std::isfinite(norm_min_increase) && norm_min_increase >= 0,
            "stability.spike_norm_min_increase = {} must not be negative", norm_min_increase);
}

SpikeDetector::SpikeDetector(const SpikeDetectorConfig& config) : config_(config) { config_.validate(); }

namespace {

// "" or why `value` is a spike against `history`.
std::string spike_of(const char* what, double value, const std::deque<double>& history, double min_increase,
                     const SpikeDetectorConfig& c) {
  if (static_cast<int>(history.size()) < c.min_samples) return "";
  double mean = 0;
  for (double v : history) mean += v;
  mean /= static_cast<double>(history.size());
  double var = 0;
  for (double v : history) var += (v - mean) * (v - mean);
  const double std = std::sqrt(var / static_cast<double>(history.size()));
  if (value > mean + c.zscore * std && value > mean * (1 + min_increase)) {
    return fmt::format("{} {:.4g} is above the last {} steps' mean {:.4g} + {} x std {:.3g} and {:.0f}% over the mean",
                       what, value, history.size(), mean, c.zscore, std, 100 * (value / mean - 1));
  }
  return "";
}

}  // namespace

std::string SpikeDetector::check(double loss, double norm) const {
  const std::string l = spike_of("loss", loss, losses_, config_.min_increase, config_);
  if (!l.empty()) return l;
  return spike_of("gradient norm", norm, norms_, config_.norm_min_increase, config_);
}

void SpikeDetector::record(double loss, double norm) {
  losses_.push_back(loss);
  norms_.push_back(norm);
  while (static_cast<int>(losses_.size()) > config_.window) losses_.pop_front(), norms_.pop_front();
}

std::vector<double> SpikeDetector::state() const {
  std::vector<double> s;
  for (size_t i = 0; i < losses_.size(); ++i) s.push_back(losses_[i]), s.push_back(norms_[i]);
  return s;
}

void SpikeDetector::restore(const std::vector<double>& state) {
  NDT_CHECK(state.size() % 2 == 0 && static_cast<int>(state.size() / 2) <= config_.window,
            "spike detector state of {} numbers does not fit a window of {} (loss, norm) pairs", state.size(),
            config_.window);
  losses_.clear(), norms_.clear();
  for (size_t i = 0; i < state.size(); i += 2) record(state[i], state[i + 1]);
}

}  // namespace ndt
