// The training loop, composed of parts that each own one concern:
//   TrainingModel   the parallelised model and a step's forward/backward (train/training_model.h)
//   TrainingData    the shards, checked, and the batch of each step (train/training_data.h)
//   StepGuard       the stability decisions: spikes, ZClip, loss scaling, rollbacks (train/step_guard.h)
//   TrainingCheckpoints  saves, resumes, the stop signals (train/checkpointing.h)
//   RunLog, MetricsWriter  what the run prints and records (train/run_log.h, train/metrics_writer.h)
//   FaultInjection  the [debug] faults (train/fault_injection.h)
// The trainer builds them, runs the steps (train.steps, a validation every
// train.eval_every), and decides what a run does at its edges: a resume, a stop signal,
// a non-finite step, a failed write. Rank 0 of the mesh logs and writes the metrics.
#pragma once

#include "comm/device_mesh.h"
#include "offload/io_stats.h"
#include "train/checkpointing.h"
#include "train/config.h"
#include "train/fault_injection.h"
#include "train/layout_check.h"
#include "train/metrics_writer.h"
#include "train/peak_flops.h"
#include "train/run_lock.h"
#include "train/run_log.h"
#include "train/step_guard.h"
#include "train/step_profile.h"
#include "train/step_stats.h"
#include "train/training_data.h"
#include "train/training_model.h"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace ndt {

class Trainer {
 public:
  // log == nullptr: silent (tests); otherwise only the mesh's rank 0 logs and writes
  // <out_dir>/metrics.jsonl. A one-rank run passes a one-rank mesh (DeviceMesh()).
  // Everything the run will need is checked here, before step 1: the config, every data
  // file's tokens, the folders it writes (rank 0 locks them: run_lock.h) and what they
  // hold (checkpoints of another run are never deleted unless checkpoint.overwrite), the
  // checkpoint to resume or the weights to start from. Collective; an error on any rank
  // is thrown on every rank (agreed_error.h).
  Trainer(const RunConfig& config, DeviceMesh& mesh, std::ostream* log);

  StepStats step();
  double evaluate();
  // parallel.layout = "auto": run() sets the measured step time against this prediction
  // after parallel.layout_check_steps steps (train/layout_check.h), printed and recorded.
  void expect_layout(const LayoutPrediction& prediction);  // mean validation loss over train.eval_batches batches of train.batch_size rows
  // Trains to train.steps (or a stop signal: train/stop_signal.h), saves, evaluates and
  // samples. A step whose loss or gradient norm is not finite ends the run with an
  // ndt::Error after saving the last finite state (if checkpoints are on) under
  // stability.on_nonfinite = stop; skip and rollback go on (docs/stability.md), and too
  // many rollbacks end it too; so does a metrics file that cannot be written, after
  // saving. The final checkpoint is written before the final evaluation and the sample,
  // so neither can lose it.
  RunSummary run();

  Transformer& model() { return model_->model(); }
  // Every parameter's whole (logical) value, in store order (collective over the mesh).
  std::vector<float> full_parameters() { return model_->full_parameters(); }
  int64_t steps_done() const { return step_; }
  const PipelineRunner* pipeline() const { return model_->pipeline(); }  // null without pp
  const RunConfig& config() const { return config_; }  // resolved for the mesh

  // Checkpoints (train/checkpointing.h): save the state after the steps done so far
  // (async: on a background thread, committed at a later step or by finish), and wait
  // for a save in flight to be committed. Collective.
  void save_checkpoint(bool async);
  void finish_checkpoints() { checkpoints_->finish(); }
  const TrainingCheckpoints& checkpoints() const { return *checkpoints_; }
  GradientSync& gradient_sync() { return model_->sync(); }
  const DynamicLossScaler* loss_scaler() const { return guard_.loss_scaler(); }
  // From the next step on, the training data is `count` batches further on (what a
  // rollback does after reloading; tests use it for the run whose data lacks a window).
  void skip_batches(int64_t count) { data_.skip(step_, count); }
  // Training batches skipped so far, as (first data position, count).
  const std::vector<std::pair<int64_t, int64_t>>& skipped_batches() const { return data_.skipped(); }

 private:
  bool leads() const { return mesh_.world().rank() == 0; }
  void resume_or_initialise();
  // The states beside the tensors a checkpoint holds: fp8, the step guard's, and on
  // resume the data position.
  void restore_states(const nlohmann::json& state, bool resume);
  FetchRows train_rows(int64_t position) const;
  // The stability decision's consequences: the summary counts, the step's events and
  // interventions, a rollback.
  void apply_decision(const StepDecision& d, StepStats& s);
  // stability.*: reload the newest checkpoint and skip the batches since it, or stop
  // after too many rollbacks (an error naming that checkpoint); before the first save,
  // only skip the update.
  void rollback(StepStats& s, const std::string& reason);
  void finish_step_stats(StepStats& s, double seconds, double exposed_before, const offload::IoCounters& io_before);
  // The MoE blocks' totals of this step over the job, into s (MoE models only).
  void collect_moe_totals(StepStats& s);
  // The mean over the data- and context-parallel ranks (as f32) of up to 2 values, in
  // place, in one all-reduce.
  // The step's mean loss and z-loss over every rank's micro-batches: without loss masks
  // the mean of the micro-batches' means (each holds as many targets), with masks the
  // global sum over `counted`, the global count of the targets that count.
  std::array<double, 2> mean_losses(const MicroBatchLosses& sums, int64_t counted);
  void reduce_over_dp(double* values, int n, ReduceOp op);  // over dp and cp, in float
  bool on_every_rank(bool local);    // collective: local is true on every rank
  void update_fp8_scales();          // precision.fp8: this step's amaxes, max over ranks, into the histories
  // The validation loss; with a stop requested on any rank before its end (stoppable),
  // nothing.
  std::optional<double> run_evaluation(bool stoppable);
  bool stop_agreed();                // collective: a stop signal on any rank
  // A step boundary of run(): a periodic save, the agreed stop signal and metrics health.
  StepBoundary boundary();
  // Saves the state after the steps done (unless saved already); says where, or why not.
  // Saves the state after the steps done (unless saved already): "<what> is saved in
  // DIR", or why nothing was.
  std::string save_for_stop(const std::string& what);
  [[noreturn]] void stop_on_non_finite(const StepStats& s);
  [[noreturn]] void stop_on_metrics_failure();
  // A swap file failed during a step (offload: a full disk, an I/O error, a damaged
  // chunk): the states on disk are part updated, so nothing is saved; the error names
  // the file and the last committed checkpoint, which is intact.
  [[noreturn]] void stop_on_swap_failure(const Error& e);
  void finish_run(RunSummary& summary);
  void sample(RunSummary& summary);  // sample.tokens of text after sample.prompt, unless stopped

  RunConfig config_;  // resolved for the mesh
  DeviceMesh& mesh_;
  RunLog log_;
  FaultInjection faults_;
  TrainingData data_;
  std::vector<std::unique_ptr<RunFolderLock>> locks_;  // rank 0; released last
  std::unique_ptr<TrainingCheckpoints> checkpoints_;
  std::unique_ptr<TrainingModel> model_;
  StepGuard guard_;
  PeakFlops peak_;
  std::unique_ptr<MetricsWriter> metrics_;  // opened once the run owns its folder
  std::optional<StepProfiler> profiler_;     // train.profile
  std::optional<int64_t> resumed_step_;
  int64_t step_ = 0;
  int stop_signal_ = 0;  // the stop signal the ranks agreed on (0: none)
  StabilityCounts counts_;
  std::optional<LayoutCheck> layout_check_;  // parallel.layout = "auto"
};

}  // namespace ndt
