// What a training step and a whole run report: the values the progress line, the
// metrics records (train/metrics_writer.h) and the tests read.
#pragma once

#include "train/step_profile.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ndt {

// What the stability checks and the loss scaler did at a step (docs/stability.md): a
// spike warned of, an update skipped (for a spike or a non-finite value), a rollback,
// a ZClip clip, an fp16 overflow the loss scaler skipped, a non-finite step that stops
// the run. `ndtrain report` charts events by kind (metrics record "kind").
enum class EventKind { spike, skip, rollback, clip, overflow, nonfinite };
std::string_view event_kind_name(EventKind kind);

struct StepEvent {
  EventKind kind;
  std::string text;
};

struct StepStats {
  int64_t step = 0;  // 0-based index of the step just taken
  double loss = 0;     // mean token cross-entropy (without the z-loss)
  double z_loss = 0;   // optim.z_loss: the mean token z term (0 when off)
  float lr = 0;
  double grad_norm = 0;
  double seconds = 0;
  double tokens_per_s = 0;
  double mfu = 0;  // model FLOPs utilisation: the model's training FLOPs, counted once
  double hfu = 0;  // hardware FLOPs utilisation: with the FLOPs activation checkpointing recomputes
  size_t peak_bytes = 0;
  double comm_wait_seconds = 0;  // data-parallel all-reduce time backward did not hide
  // Offload (docs/offload.md): this rank's swap-file bytes read and written during the
  // step, and the seconds the step was blocked waiting for them.
  int64_t io_read_bytes = 0, io_write_bytes = 0;
  double io_wait_seconds = 0;
  // False when the loss or the gradient norm was NaN or infinite on any rank (one
  // all-reduce of a flag, so every rank decides alike): the update was then not applied.
  bool finite = true;
  // Dynamic loss scaling (precision.loss_scaling): the scale this step's loss was
  // multiplied by, and whether a non-finite step was an overflow the scaler handled
  // (skipped, scale reduced, steps_done() advanced); otherwise a non-finite step did not
  // advance steps_done() and ends the run (stability.on_nonfinite = stop).
  float loss_scale = 1;
  float next_loss_scale = 1;  // the scale after this step's update of it
  bool overflow_skipped = false;
  // What the stability checks did, as events, and the interventions among them (not the
  // overflow or non-finite reports) as one text, "" when none.
  std::vector<StepEvent> events;
  std::string intervention;
  // Mixture of experts (docs/moe.md), over the global batch and every MoE block: the
  // load-balancing and router z-loss terms the objective adds (means, like loss), the
  // fraction of token x slot assignments capacity dropped, the assignments each expert
  // processed, and the experts' load under ep (MoeJobTotals::expert_load).
  double moe_aux_loss = 0, moe_z_loss = 0, moe_drop_rate = 0, moe_expert_load = 1;
  std::vector<int64_t> moe_tokens_per_expert;
  // train.profile: the step's time by op class, communication and the rest (this rank's).
  std::optional<StepProfile> profile;
};

// Interventions over a run (the summary's stability line).
struct StabilityCounts {
  int64_t spikes = 0;         // loss or gradient-norm spikes detected
  int64_t skipped_steps = 0;  // updates skipped by stability.on_spike / on_nonfinite = skip
  int64_t rollbacks = 0;
  int64_t zclips = 0;         // steps ZClip clipped (optim.clip_mode = zclip)
};

struct RunSummary {
  std::vector<double> losses;
  std::vector<std::pair<int64_t, double>> val_losses;  // (steps done, loss)
  double median_tokens_per_s = 0;
  double median_mfu = 0;
  double median_hfu = 0;
  double unigram_entropy = 0;  // nats per token of the training data
  std::string sample;
  // data.mix: each training set's path, weight and the fraction of rows it gave (empty
  // without a blend).
  nlohmann::json data_mix = nlohmann::json::array();
  bool stopped_by_signal = false;  // SIGTERM or SIGINT: stopped (and saved) before train.steps
  int stop_signal = 0;             // which one (0: none)
  int64_t overflow_skipped_steps = 0;  // dynamic loss scaling: steps skipped for overflow
  float final_loss_scale = 1;
  int64_t spikes = 0;         // loss or gradient-norm spikes detected
  int64_t skipped_steps = 0;  // updates skipped by stability.on_spike / on_nonfinite = skip
  int64_t rollbacks = 0;
  int64_t zclips = 0;         // steps ZClip clipped (optim.clip_mode = zclip)
  // train.profile: the run's peak measured again after its last step, as at its start
  // (0: not measured), so that a moment's other work during one sample shows.
  double peak_flops_at_end = 0;
};

}  // namespace ndt
