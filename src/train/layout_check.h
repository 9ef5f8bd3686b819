// parallel.layout = "auto": the planner's prediction for the layout a run chose, held to
// what the run measures. After the first step (which pays for first-touch page faults)
// the median of parallel.layout_check_steps steps' times is set against the predicted
// step time, printed and recorded (metrics.jsonl's layout_check record, the run report).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ndt {

// What the planner predicted for the chosen layout (plan/auto_layout.h).
struct LayoutPrediction {
  std::string layout;     // Layout::describe()
  std::string runner_up;  // the second fastest layout's describe(); empty: none fits
  std::string device;     // the profile's source line
  double step_s = 0;
  double runner_up_step_s = 0;
  int64_t memory_bytes = 0;  // per device, the stage with the most
  double mfu = 0;
};

struct LayoutCheckResult {
  LayoutPrediction predicted;
  double measured_step_s = 0;  // the median of the steps measured
  int steps = 0;               // how many
  // (measured - predicted) / predicted
  double error() const { return (measured_step_s - predicted.step_s) / predicted.step_s; }
  // "layout check after step 6: dp2 | ddp | mb4 | none measured 0.0312 s per step (median of 5) against 0.0290 s
  // predicted (+7.6%)"
  std::string describe(int64_t step) const;
};

class LayoutCheck {
 public:
  LayoutCheck(LayoutPrediction prediction, int64_t check_steps);
  // A step's time (step: 0-based). The comparison, once: after the step that completes
  // the check, or at the run's last step (last) if the run is shorter; a one-step run
  // measures its only step.
  std::optional<LayoutCheckResult> observe(int64_t step, double seconds, bool last);

 private:
  LayoutPrediction prediction_;
  int64_t check_steps_;
  std::vector<double> seconds_;
  bool done_ = false;
};

}  // namespace ndt
