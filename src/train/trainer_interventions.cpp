// The trainer's interventions: what the loop does when a step is not a plain step. The
// consequences of the step guard's decision (the summary counts, the step's events, a
// rollback), and the stops that save what they can and say what happened (a non-finite
// step, a metrics file that cannot be written). Part of Trainer (train/trainer.h).
#include "train/trainer.h"

#include "checkpoint/directory.h"
#include "train/agreed_error.h"

#include <fmt/format.h>

#include <cctype>

namespace ndt {

namespace {

std::string capitalised(std::string text) {
  if (!text.empty()) text[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(text[0])));
  return text;
}

}  // namespace

void Trainer::apply_decision(const StepDecision& d, StepStats& s) {
  if (d.spike) ++counts_.spikes;
  if (!s.finite && !d.overflow) s.events.push_back({EventKind::nonfinite, d.reason});
  if (d.overflow) {
    s.events.push_back({EventKind::overflow, fmt::format("overflow (loss {}, gradient norm {}) at loss scale {}: update "
                                                         "skipped, scale now {}",
                                                         s.loss, s.grad_norm, s.loss_scale, s.next_loss_scale)});
  }
  if (d.applies() && d.spike) s.events.push_back({EventKind::spike, "spike (update applied): " + d.reason});
  if (d.action == StepAction::clip) {
    ++counts_.zclips;
    s.events.push_back({EventKind::clip, fmt::format("ZClip: gradient norm {:.4g} (z-score {:.1f}) clipped to {:.4g}",
                                                     d.zclip.norm, d.zclip.z, d.zclip.target)});
  }
  if (d.action == StepAction::skip && !d.overflow) {
    ++counts_.skipped_steps;
    s.events.push_back({EventKind::skip, "update skipped on every rank: " + d.reason});
  }
  if (d.action == StepAction::rollback) rollback(s, d.reason);
  for (const StepEvent& e : s.events) {
    if (e.kind == EventKind::overflow || e.kind == EventKind::nonfinite) continue;
    s.intervention += (s.intervention.empty() ? "" : "; ") + e.text;
  }
}

void Trainer::rollback(StepStats& s, const std::string& reason) {
  const int64_t at = s.step + 1;  // the 1-based step that failed
  checkpoints_->finish();
  const std::optional<std::filesystem::path> latest = ckpt::latest_checkpoint(checkpoints_->root());
  if (!latest) {  // before the first save: nothing to go back to, so the update is only skipped
    step_ = s.step + 1;
    ++counts_.skipped_steps;
    s.events.push_back({EventKind::skip, "no checkpoint to roll back to yet, so the update is skipped on every rank: " +
                                             reason});
    return;
  }
  if (const std::optional<std::string> refused = guard_.rollback_refused(at)) {
    fail("step {}: {}; {}, so the run stops. The newest checkpoint, {}, holds a state from before the trouble: look at "
         "the data after it (batch {}) or lower optim.lr (now {}), then resume with --resume",
         at, reason, *refused, latest->string(), data_.position(s.step), config_.schedule.max_lr);
  }
  nlohmann::json state;
  try {
    state = load_training_checkpoint(*latest, model_->sync(), config_, mesh_);
  } catch (const Error& e) {
    // Nothing was loaded: the state is still the one before this step's update, finite.
    const std::string saved = save_for_stop(fmt::format("the state after step {} (before the spike)", s.step));
    fail("step {}: {}; a rollback to {} was in progress and failed: {}. {}; resume with --resume once the trouble is "
         "looked at",
         at, reason, latest->string(), e.what(), capitalised(saved));
  }
  const int64_t to = state.at("step").get<int64_t>();
  restore_states(state, /*resume=*/false);
  // The batches of steps to .. s.step (those that led here), and
  // stability.rollback_extra_batches after them, are skipped: from now on the data is
  // that many batches further on.
  const int64_t first = data_.position(to), count = s.step + 1 - to + config_.rollback_extra_batches;
  step_ = to;
  data_.skip(to, count);
  guard_.record_rollback(at, to);
  ++counts_.rollbacks;
  s.events.push_back({EventKind::rollback, fmt::format("rolled back to step {} ({}) and skipped training batches {}..{}: {}",
                                                       to, latest->string(), first, first + count - 1, reason)});
}

std::string Trainer::save_for_stop(const std::string& what) {
  if (!checkpoints_->enabled()) return "checkpoints are off, so nothing was saved";
  try {
    checkpoints_->finish();
    if (checkpoints_->last_saved_step() != step_) save_checkpoint(/*async=*/false);
    return fmt::format("{} is saved in {}", what, (checkpoints_->root() / ckpt::checkpoint_dir_name(step_)).string());
  } catch (const Error& e) {
    return fmt::format("{} could not be saved: {}", what, e.what());
  }
}

void Trainer::stop_on_non_finite(const StepStats& s) {
  log_.step(s);
  const std::string saved = save_for_stop(fmt::format("the state after step {} (the last finite one)", step_));
  fail("step {}: the loss is {} and the gradient norm {}, so training cannot go on; the update was not applied and "
       "the run stops. {}. A smaller optim.lr (now {}), a longer optim.warmup_steps (now {}) or optim.grad_clip "
       "(now {}) may help; resume with --resume",
       s.step + 1, s.loss, s.grad_norm, capitalised(saved), config_.schedule.max_lr, config_.schedule.warmup_steps,
       config_.grad_clip);
}

void Trainer::stop_on_swap_failure(const Error& e) {
  // The moments (and with parameter offload the parameters) on disk are part of this
  // step's update and part of the last one's: no state to save. A save in flight is not
  // committed (TrainingCheckpoints' destructor), so the newest committed one stays newest.
  const std::optional<std::filesystem::path> latest =
      checkpoints_->enabled() ? ckpt::latest_checkpoint(checkpoints_->root()) : std::nullopt;
  fail("step {} of {}: {}. The run stops without saving (the states on disk may hold part of this step's update); {}",
       step_ + 1, config_.steps, e.what(),
       latest ? fmt::format("the last checkpoint, {}, is intact: continue with --resume once offload.dir (\"{}\") "
                            "is fixed (the swap files are recreated from the checkpoint)",
                            latest->string(), config_.offload_folder())
              : std::string("no checkpoint of this run was committed, so it starts over"));
}

void Trainer::stop_on_metrics_failure() {
  const std::string saved = save_for_stop(fmt::format("the state after step {}", step_));
  const std::string failure = metrics_->failure().value_or("");
  throw_if_any_rank_failed(
      mesh_, leads() ? fmt::format("{}; the run stops rather than train on with its metrics cut. {}; resume with "
                                   "--resume once {} can be written",
                                   failure, capitalised(saved), metrics_->path())
                     : std::string());
  fail("rank 0 could not write the metrics; the run stops. {}", capitalised(saved));  // rank 0's message, else this
}

}  // namespace ndt
