// Loss-spike and divergence detection: each applied step's loss and gradient norm
// against the statistics of the last `window` applied steps. A value is a spike when,
// with at least min_samples values seen, it exceeds both mean + zscore x std and
// mean x (1 + min_increase) (norm_min_increase for the gradient norm, whose clean
// curve has heavier tails: measured on the demo, +85% once in 120 steps): the z-score
// alone fires on a flat curve's tiny noise, the ratio alone on an early, steep one. Every rank feeds it the same global loss and norm,
// so every rank decides alike; its window is saved in checkpoints so a resumed run
// decides as the uninterrupted one would.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace ndt {

struct SpikeDetectorConfig {
  int window = 32;          // stability.spike_window
  int min_samples = 8;      // stability.spike_min_samples
  double zscore = 6.0;      // stability.spike_zscore
  double min_increase = 0.25;  // stability.spike_min_increase (the loss)
  double norm_min_increase = 1.0;  // stability.spike_norm_min_increase
  void validate() const;    // throws naming the key and value
};

class SpikeDetector {
 public:
  explicit SpikeDetector(const SpikeDetectorConfig& config);
  // What is wrong with this step's loss and norm ("" when nothing): e.g. "loss 6.12 is
  // above the last 32 steps' mean 3.41 + 6 x std 0.05".
  std::string check(double loss, double norm) const;
  // Adds an applied step's values to the window.
  void record(double loss, double norm);
  // The window as [loss, norm, loss, norm, ...], oldest first (checkpoint state), and back.
  std::vector<double> state() const;
  void restore(const std::vector<double>& state);

 private:
  SpikeDetectorConfig config_;
  std::deque<double> losses_, norms_;
};

}  // namespace ndt
