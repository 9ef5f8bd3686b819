// Training checkpoints: what a run saves, when, and how it resumes on any mesh.
// A checkpoint (src/checkpoint/, docs/checkpoints.md) holds every parameter and both
// AdamW moments as boxes of their logical tensors, so resharding is the reader's job:
// each rank reads the boxes its own slices need (GradientSync::state_slices), whatever
// mesh, ZeRO stage or tp size wrote them. The state JSON holds the step (which is also
// the data loader's position and the schedule's: batches and learning rates are
// functions of (seed, step)), AdamW's step count, the seed, the model config and the
// run config. Saving: one rank creates <dir>/step-N.tmp, every rank snapshots its
// saved slices (a host copy) and writes them, in the background when async; once every
// rank is done (checked with one tiny all-reduce per step while a save is in flight),
// rank 0 commits (metadata, then rename) and prunes to the last keep_last. A crash at
// any point leaves the previous checkpoint loadable. Loading reads every slice into
// temporary buffers first and applies them only once every rank has read all of its
// slices, so a failed load changes nothing.
#pragma once

#include "checkpoint/async_saver.h"
#include "comm/device_mesh.h"
#include "parallel/data/gradient_sync.h"
#include "train/config.h"
#include "train/stop_signal.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <ostream>

namespace ndt {

// What the ranks agree on at a step boundary: the stop signal any rank received (the
// larger number wins: SIGTERM over SIGINT; 0 none) and whether rank 0 failed to write
// the metrics.
struct StepBoundary {
  int stop_signal = 0;
  bool metrics_failed = false;
};

class TrainingCheckpoints {
 public:
  // Saves go to config.checkpoint_dir (or <out_dir>/checkpoints); disabled when both are empty.
  TrainingCheckpoints(const RunConfig& config, DeviceMesh& mesh, std::ostream* log);
  ~TrainingCheckpoints();
  bool enabled() const { return !root_.empty(); }
  const std::filesystem::path& root() const { return root_; }

  // Snapshots this rank's state at `step` and writes it (on a background thread when
  // async; committed by a later poll() or finish()). A state holding a NaN or an
  // infinity is never written: throws on every rank naming the tensor, and the last
  // committed checkpoint stays the newest. Collective.
  void save(int64_t step, GradientSync& sync, const nlohmann::json& state, bool async);
  // At a step boundary: commits a save every rank has finished, and agrees on `local`
  // (this rank's view). Collective (one small all-reduce) on several ranks.
  StepBoundary poll(StepBoundary local);
  // Waits for the save in flight and commits it. Collective.
  void finish();

  // Before step 1 of a run that starts afresh (resumed_step empty) or resumes from
  // resumed_step: the folder must not hold checkpoints the run would not continue from
  // (an earlier run's, or newer ones), since its saves and pruning would replace them.
  // With overwrite they are deleted, and the log says so; without, throws naming them
  // and both ways forward. Leftover *.tmp saves are removed. Collective (rank 0 looks).
  void claim(std::optional<int64_t> resumed_step, bool overwrite);
  std::optional<int64_t> last_saved_step() const { return last_saved_step_; }

  double blocked_seconds() const { return blocked_seconds_; }  // training stopped by saves
  double last_write_seconds() const { return saver_.last_stats().seconds; }
  int64_t last_write_bytes() const { return saver_.last_stats().bytes; }

 private:
  void commit();
  int rank() const { return mesh_.world().rank(); }
  int world_size() const { return mesh_.world().size(); }

  int keep_last_;
  DeviceMesh& mesh_;
  std::ostream* log_;
  std::filesystem::path root_;
  ckpt::AsyncSaver saver_;
  std::optional<int64_t> in_flight_step_;
  std::filesystem::path in_flight_tmp_;
  nlohmann::json in_flight_state_;
  std::optional<int64_t> last_saved_step_;
  double blocked_seconds_ = 0;
};

// The checkpoint a resume setting names: "latest" (the newest committed one under
// root), or a path as resolve_checkpoint (train/model_checkpoint.h) takes it: a
// checkpoint, a folder of them or a run folder. Throws naming the path when there is none.
std::filesystem::path resolve_resume(const std::string& resume, const std::filesystem::path& root);

// Loads a training checkpoint into sync's slices and AdamW step count; returns its
// state JSON. Checks the model config against the run's first (an error names each key
// that differs). Collective: applies nothing unless every rank read all of its slices.
nlohmann::json load_training_checkpoint(const std::filesystem::path& dir, GradientSync& sync, const RunConfig& config,
                                        DeviceMesh& mesh);

// The state JSON a run saves at `step` on `mesh`.
nlohmann::json training_state(const RunConfig& config, int64_t step, const GradientSync& sync, const DeviceMesh& mesh);

}  // namespace ndt
