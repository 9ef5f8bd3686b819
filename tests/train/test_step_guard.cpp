// The step guard's decisions (train/step_guard.h) as values, without MPI or a model:
// every action of stability.on_spike and on_nonfinite, ZClip's clip and norm clipping,
// the loss scaler's overflow skip and its floor, the rollback budget and the lowered
// learning rate, and its checkpoint state.
#include "train/step_guard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace ndt {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

RunConfig guarded(SpikeAction on_spike, NonfiniteAction on_nonfinite) {
  RunConfig c;
  c.on_spike = on_spike;
  c.on_nonfinite = on_nonfinite;
  c.spike.window = 8;
  c.spike.min_samples = 4;
  c.grad_clip = 1.0f;
  return c;
}

// Four calm steps (loss 3, norm 0.5) fill the spike window.
void calm(StepGuard& guard) {
  for (double loss : {3.0, 3.01, 2.99, 3.0}) EXPECT_EQ(guard.decide(loss, 0.5, true).action, StepAction::apply);
}

TEST(StepGuard, ACalmStepIsAppliedWithNormClipping) {
  StepGuard guard(guarded(SpikeAction::warn, NonfiniteAction::stop));
  const StepDecision under = guard.decide(3.0, 0.5, true);
  EXPECT_EQ(under.action, StepAction::apply);
  EXPECT_EQ(under.clip_factor, 1.0f);
  EXPECT_FALSE(under.spike);
  const StepDecision over = guard.decide(3.0, 4.0, true);
  EXPECT_EQ(over.action, StepAction::apply) << "optim.grad_clip clipping is part of an applied update";
  EXPECT_NEAR(over.clip_factor, 0.25, 1e-6);
  EXPECT_TRUE(over.applies() && over.advances());
}

TEST(StepGuard, EachSpikeActionIsItsOwnDecision) {
  for (const auto& [setting, action] : {std::pair{SpikeAction::warn, StepAction::apply},
                                        {SpikeAction::skip, StepAction::skip},
                                        {SpikeAction::rollback, StepAction::rollback}}) {
    StepGuard guard(guarded(setting, NonfiniteAction::stop));
    calm(guard);
    const StepDecision d = guard.decide(9.0, 0.5, true);
    EXPECT_EQ(d.action, action) << spike_action_name(setting);
    EXPECT_TRUE(d.spike);
    EXPECT_NE(d.reason.find("loss 9 is above"), std::string::npos) << d.reason;
    EXPECT_EQ(d.applies(), setting == SpikeAction::warn);
    EXPECT_EQ(d.advances(), setting != SpikeAction::rollback);
  }
}

TEST(StepGuard, ASpikeNotAppliedStaysOutOfTheWindow) {
  StepGuard guard(guarded(SpikeAction::skip, NonfiniteAction::stop));
  calm(guard);
  EXPECT_EQ(guard.decide(9.0, 0.5, true).action, StepAction::skip);
  EXPECT_EQ(guard.decide(9.0, 0.5, true).action, StepAction::skip) << "the skipped 9 did not become normal";
}

TEST(StepGuard, EachNonFiniteActionIsItsOwnDecision) {
  for (const auto& [setting, action] : {std::pair{NonfiniteAction::stop, StepAction::stop},
                                        {NonfiniteAction::skip, StepAction::skip},
                                        {NonfiniteAction::rollback, StepAction::rollback}}) {
    StepGuard guard(guarded(SpikeAction::warn, setting));
    const StepDecision d = guard.decide(kNan, 0.5, false);
    EXPECT_EQ(d.action, action) << nonfinite_action_name(setting);
    EXPECT_FALSE(d.overflow);
    EXPECT_EQ(d.reason, "the loss is nan and the gradient norm 0.5");
  }
}

TEST(StepGuard, TheLossScalerSkipsAnOverflowUntilItsFloor) {
  RunConfig c = guarded(SpikeAction::warn, NonfiniteAction::stop);
  c.loss_scaling = LossScaling::dynamic;
  c.loss_scale.initial_scale = 4;
  c.loss_scale.min_scale = 1;
  StepGuard guard(c);
  EXPECT_EQ(guard.loss_scale(), 4.0f);
  for (float next : {2.0f, 1.0f}) {
    const StepDecision d = guard.decide(kNan, kNan, false);
    EXPECT_EQ(d.action, StepAction::skip);
    EXPECT_TRUE(d.overflow);
    EXPECT_TRUE(d.advances());
    EXPECT_EQ(guard.loss_scale(), next);
  }
  // At the floor the scaler cannot help: stability.on_nonfinite decides.
  const StepDecision floor = guard.decide(kNan, kNan, false);
  EXPECT_EQ(floor.action, StepAction::stop);
  EXPECT_FALSE(floor.overflow);
}

TEST(StepGuard, ZClipClipsAnOutlierAndReplacesTheFixedBound) {
  RunConfig c = guarded(SpikeAction::warn, NonfiniteAction::stop);
  c.clip_mode = ClipMode::zclip;
  c.zclip.warmup_steps = 4;
  c.spike.zscore = 1e9;  // no spikes: ZClip alone
  StepGuard guard(c);
  for (double norm : {2.0, 2.1, 1.9, 2.0, 2.05}) {
    const StepDecision d = guard.decide(3.0, norm, true);
    EXPECT_EQ(d.action, StepAction::apply);
    EXPECT_EQ(d.clip_factor, 1.0f) << "norm " << norm << " is above optim.grad_clip = 1, but ZClip decides";
  }
  const StepDecision d = guard.decide(3.0, 20.0, true);
  EXPECT_EQ(d.action, StepAction::clip);
  EXPECT_TRUE(d.zclip.clipped);
  EXPECT_NEAR(d.clip_factor, d.zclip.target / 20.0, 1e-6);
  EXPECT_LT(d.clip_factor, 1.0f);
}

TEST(StepGuard, ASpikeThatZClipAlsoClipsIsBoth) {
  RunConfig c = guarded(SpikeAction::warn, NonfiniteAction::stop);
  c.clip_mode = ClipMode::zclip;
  c.zclip.warmup_steps = 4;
  StepGuard guard(c);
  calm(guard);
  guard.decide(3.0, 0.5, true);
  const StepDecision d = guard.decide(3.0, 50.0, true);
  EXPECT_TRUE(d.spike);
  EXPECT_EQ(d.action, StepAction::clip);
}

TEST(StepGuard, RollbacksAreCountedInTheirWindowAndLowerTheLearningRate) {
  RunConfig c = guarded(SpikeAction::rollback, NonfiniteAction::stop);
  c.max_rollbacks = 2;
  c.rollback_window = 100;
  c.rollback_lr_factor = 0.5f;
  c.rollback_lr_steps = 10;
  StepGuard guard(c);
  EXPECT_FALSE(guard.rollback_refused(50));
  guard.record_rollback(50, 40);
  EXPECT_EQ(guard.lr_factor(45), 0.5f);
  EXPECT_EQ(guard.lr_factor(50), 1.0f) << "rollback_lr_steps after the checkpoint's step 40";
  guard.record_rollback(60, 40);
  const std::optional<std::string> refused = guard.rollback_refused(70);
  ASSERT_TRUE(refused);
  EXPECT_EQ(*refused, "this would be rollback 3 within 100 steps (stability.max_rollbacks = 2)");
  EXPECT_FALSE(guard.rollback_refused(151)) << "the first two fell out of the window";
}

TEST(StepGuard, ItsStateResumesTheSameDecisions) {
  RunConfig c = guarded(SpikeAction::skip, NonfiniteAction::stop);
  c.loss_scaling = LossScaling::dynamic;
  c.clip_mode = ClipMode::zclip;
  StepGuard a(c);
  calm(a);
  a.decide(kNan, kNan, false);  // an overflow: the scale halves
  a.record_rollback(7, 2);
  nlohmann::json state;
  a.save(state);
  StepGuard resumed(c), rolled_back(c);
  resumed.restore(state, /*resume=*/true);
  rolled_back.restore(state, /*resume=*/false);
  EXPECT_EQ(resumed.loss_scale(), a.loss_scale());
  EXPECT_EQ(resumed.decide(9.0, 0.5, true).action, StepAction::skip) << "the spike window came back";
  EXPECT_EQ(resumed.rollback_refused(8), a.rollback_refused(8));
  EXPECT_EQ(rolled_back.lr_factor(3), 1.0f) << "a rollback keeps its own record";
  EXPECT_EQ(resumed.lr_factor(2), a.lr_factor(2));
}

}  // namespace
}  // namespace ndt
