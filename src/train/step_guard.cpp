#include "train/step_guard.h"

#include "optim/clip.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace ndt {

StepGuard::StepGuard(const RunConfig& config)
    : grad_clip_(config.grad_clip),
      on_spike_(config.on_spike),
      on_nonfinite_(config.on_nonfinite),
      max_rollbacks_(config.max_rollbacks),
      rollback_window_(config.rollback_window),
      rollback_lr_steps_(config.rollback_lr_steps),
      rollback_lr_factor_(config.rollback_lr_factor),
      min_loss_scale_(config.loss_scale.min_scale),
      spikes_(config.spike) {
  if (config.clip_mode == ClipMode::zclip) zclip_ = std::make_unique<ZClip>(config.zclip);
  if (config.scales_loss()) scaler_ = std::make_unique<DynamicLossScaler>(config.loss_scale);
}

StepDecision StepGuard::decide_non_finite(double loss, double norm) const {
  StepDecision d;
  d.reason = fmt::format("the loss is {} and the gradient norm {}", loss, norm);
  switch (on_nonfinite_) {
    case NonfiniteAction::stop: d.action = StepAction::stop; break;
    case NonfiniteAction::skip: d.action = StepAction::skip; break;
    case NonfiniteAction::rollback: d.action = StepAction::rollback; break;
  }
  return d;
}

void StepGuard::clip(StepDecision& d, double norm) {
  d.clip_factor = clip_factor(norm, grad_clip_);
  if (!zclip_) return;
  // ZClip replaces the fixed bound.
  d.zclip = zclip_->update(norm);
  d.clip_factor = d.zclip.clipped ? static_cast<float>(std::min(1.0, d.zclip.target / norm)) : 1.0f;
  if (d.zclip.clipped) d.action = StepAction::clip;
}

StepDecision StepGuard::decide(double loss, double norm, bool finite) {
  if (!finite) {
    // An overflow at a scale the scaler may still lower is its to handle.
    if (scaler_ && scaler_->scale() > min_loss_scale_) {
      StepDecision d;
      d.overflow = !scaler_->update(true);
      d.action = StepAction::skip;
      return d;
    }
    return decide_non_finite(loss, norm);
  }
  if (scaler_) scaler_->update(false);
  StepDecision d;
  d.reason = spikes_.check(loss, norm);
  d.spike = !d.reason.empty();
  if (d.spike && on_spike_ == SpikeAction::skip) d.action = StepAction::skip;
  if (d.spike && on_spike_ == SpikeAction::rollback) d.action = StepAction::rollback;
  if (!d.applies()) return d;
  clip(d, norm);
  spikes_.record(loss, norm);
  return d;
}

float StepGuard::lr_factor(int64_t step) const { return step < lr_factor_until_ ? rollback_lr_factor_ : 1.0f; }

std::optional<std::string> StepGuard::rollback_refused(int64_t at) const {
  int64_t recent = 0;
  for (int64_t r : rollback_steps_) recent += r > at - rollback_window_;
  if (recent < max_rollbacks_) return std::nullopt;
  return fmt::format("this would be rollback {} within {} steps (stability.max_rollbacks = {})", recent + 1,
                     rollback_window_, max_rollbacks_);
}

void StepGuard::record_rollback(int64_t at, int64_t to) {
  rollback_steps_.push_back(at);
  lr_factor_until_ = to + rollback_lr_steps_;
}

void StepGuard::save(nlohmann::json& state) const {
  if (scaler_) {
    const LossScalerState ls = scaler_->state();
    state["loss_scaler"] = {{"scale", ls.scale}, {"clean_steps", ls.clean_steps}, {"skipped", ls.skipped}};
  }
  if (zclip_) state["zclip"] = zclip_->state();
  nlohmann::json& stability = state["stability"];
  stability["rollback_steps"] = rollback_steps_;
  stability["lr_factor_until"] = lr_factor_until_;
  stability["spike_window"] = spikes_.state();
}

void StepGuard::restore(const nlohmann::json& state, bool resume) {
  if (scaler_ && state.contains("loss_scaler")) {  // else (saved without scaling): the initial scale
    const nlohmann::json& ls = state.at("loss_scaler");
    scaler_->restore({ls.at("scale").get<double>(), ls.at("clean_steps").get<int>(), ls.at("skipped").get<int64_t>()});
  }
  if (zclip_ && state.contains("zclip")) zclip_->restore(state.at("zclip").get<std::vector<double>>());
  if (!state.contains("stability")) return;  // saved before the stability state existed
  const nlohmann::json& st = state.at("stability");
  spikes_.restore(st.at("spike_window").get<std::vector<double>>());
  if (!resume) return;
  rollback_steps_ = st.at("rollback_steps").get<std::vector<int64_t>>();
  lr_factor_until_ = st.at("lr_factor_until").get<int64_t>();
}

}  // namespace ndt
