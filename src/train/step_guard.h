// The stability policy of a training step (docs/stability.md), as values: given the
// step's global loss and gradient norm, decide() returns what to do with the update and
// why. It owns what those decisions depend on and what a checkpoint must carry for a
// resumed run to decide as the uninterrupted one would: the loss-spike detector, ZClip
// (optim.clip_mode = zclip), the dynamic loss scaler (precision.loss_scaling) and the
// record of rollbacks (stability.max_rollbacks within stability.rollback_window, and
// the lowered learning rate after one). It communicates nothing: every rank passes the
// same global values and so decides alike. Testable without MPI.
#pragma once

#include "optim/loss_scaler.h"
#include "optim/zclip.h"
#include "train/config.h"
#include "train/spike_detector.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ndt {

enum class StepAction {
  apply,     // the update as computed (with optim.grad_clip's clipping, if on)
  clip,      // applied with the gradients scaled down by ZClip
  skip,      // not applied on any rank; the step counts and the data moves on
  rollback,  // not applied; reload the newest checkpoint and skip the data since it
  stop,      // not applied; save the last finite state and end the run with an error
};

struct StepDecision {
  StepAction action = StepAction::apply;
  float clip_factor = 1;  // what an applied update's gradients are multiplied by
  bool spike = false;     // the loss or the norm spiked (the reason says how)
  bool overflow = false;  // non-finite with loss scaling: the scaler skipped it and lowered the scale
  std::string reason;     // the spike, or the non-finite values ("" for neither)
  ZClip::Decision zclip{false, 0, 0, 0};  // ZClip's, when it ran
  bool applies() const { return action == StepAction::apply || action == StepAction::clip; }
  // Whether the step is taken (the next step reads the next batch).
  bool advances() const { return applies() || action == StepAction::skip; }
};

class StepGuard {
 public:
  explicit StepGuard(const RunConfig& config);

  // What the loss is multiplied by before backward (the loss scale; 1 without scaling).
  float loss_scale() const { return scaler_ ? scaler_->scale() : 1.0f; }
  const DynamicLossScaler* loss_scaler() const { return scaler_.get(); }

  // The decision for a step whose global loss and (unscaled) gradient norm these are;
  // finite: both finite on every rank. Records what a decision changes: the loss
  // scale, the spike window and ZClip's statistics (applied steps only).
  StepDecision decide(double loss, double norm, bool finite);

  // The learning rate's factor at `step` (0-based): stability.rollback_lr_factor for
  // stability.rollback_lr_steps steps after a rollback, else 1.
  float lr_factor(int64_t step) const;
  // Whether a rollback at 1-based step `at` is still allowed; if not, why (naming the
  // settings).
  std::optional<std::string> rollback_refused(int64_t at) const;
  // A rollback at 1-based step `at` to the checkpoint of step `to`.
  void record_rollback(int64_t at, int64_t to);

  // The checkpoint state: "loss_scaler", "zclip" and, in state["stability"], the spike
  // window and the rollback record. restore(): the spike window always (a rollback
  // reloads it), the rollback record only on resume (a rollback keeps its own).
  void save(nlohmann::json& state) const;
  void restore(const nlohmann::json& state, bool resume);

 private:
  StepDecision decide_non_finite(double loss, double norm) const;
  void clip(StepDecision& d, double norm);

  float grad_clip_;
  SpikeAction on_spike_;
  NonfiniteAction on_nonfinite_;
  int max_rollbacks_;
  int64_t rollback_window_, rollback_lr_steps_;
  float rollback_lr_factor_;
  double min_loss_scale_;
  SpikeDetector spikes_;
  std::unique_ptr<ZClip> zclip_;                 // optim.clip_mode = zclip
  std::unique_ptr<DynamicLossScaler> scaler_;    // precision.loss_scaling
  std::vector<int64_t> rollback_steps_;          // the 1-based steps that rolled back
  int64_t lr_factor_until_ = 0;
};

}  // namespace ndt
