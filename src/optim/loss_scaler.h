// Dynamic loss scaling for fp16 training (PyTorch's GradScaler, Megatron's
// DynamicGradScaler). The loss is multiplied by scale() before backward so small fp16
// gradients do not flush to zero; the optimizer divides the gradients by it again.
// After each backward the caller checks the (unscaled or scaled) gradients with
// any_non_finite and calls update():
//   - an inf or NaN anywhere: the step is skipped (update returns false), the scale is
//     multiplied by backoff_factor (not below min_scale) and the run of clean steps
//     starts again;
//   - otherwise the step is applied (update returns true); after growth_interval clean
//     steps in a row the scale is multiplied by growth_factor (not above max_scale).
// Pure bookkeeping: no communication. With sharded gradients every rank must pass the
// same found_non_finite (the OR over ranks), so all ranks keep the same scale.
#pragma once

#include <cstdint>
#include <string_view>

namespace ndt {

// precision.loss_scaling: automatic (dynamic with fp16 compute, off otherwise; named
// "auto"), dynamic, or off. from_name throws naming the key and the choices.
enum class LossScaling { automatic, dynamic, off };
std::string_view loss_scaling_name(LossScaling mode);
LossScaling loss_scaling_from_name(std::string_view name);

struct LossScalerConfig {
  double initial_scale = 65536;       // 2^16, as GradScaler
  double growth_factor = 2;           // > 1
  double backoff_factor = 0.5;        // in (0, 1)
  int growth_interval = 2000;         // clean steps in a row before growing, >= 1
  double min_scale = 1;               // > 0
  double max_scale = 16777216;        // 2^24, far below fp32's range

  // Throws ndt::Error naming precision.loss_scale.<field> and the value.
  void validate() const;
};

// What a checkpoint keeps to resume the scaler exactly.
struct LossScalerState {
  double scale = 0;
  int clean_steps = 0;   // clean steps since the last growth or overflow
  int64_t skipped = 0;   // steps skipped for overflow over the whole run
};

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(const LossScalerConfig& config);  // validates config

  float scale() const { return static_cast<float>(scale_); }
  // Records one step's outcome; returns whether the step may be applied.
  bool update(bool found_non_finite);
  int64_t skipped_steps() const { return skipped_; }
  int clean_steps() const { return clean_steps_; }

  LossScalerState state() const { return {scale_, clean_steps_, skipped_}; }
  // Throws ndt::Error when the state does not fit this scaler's config (a scale that is
  // not finite or outside [min_scale, max_scale], a clean-step count outside
  // [0, growth_interval), a negative skip count).
  void restore(const LossScalerState& state);

 private:
  LossScalerConfig config_;
  double scale_;
  int clean_steps_ = 0;
  int64_t skipped_ = 0;
};

// Whether any of the n values is NaN or +-inf (a vectorised pass, OpenMP-parallel for
// large n).
bool any_non_finite(const float* x, int64_t n);

}  // namespace ndt
