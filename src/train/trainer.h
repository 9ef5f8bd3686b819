// The training loop: deterministic batches, gradient accumulation over micro-batches,
// data parallelism over the mesh's "dp" axis (replicated, or ZeRO-sharded over
// dp_shard), global-norm clipping, AdamW with warmup
// + cosine, periodic validation, one progress line and one metrics.jsonl record per
// step (rank 0), a summary and a text sample at the end; each step's loss and gradient
// norm checked for spikes and non-finite values, with skips and rollbacks
// (docs/stability.md).
#pragma once

#include "comm/device_mesh.h"
#include "data/run_data.h"
#include "model/transformer.h"
#include "optim/zclip.h"
#include "parallel/gradient_sync.h"
#include "parallel/pipeline_runner.h"
#include "parallel/tensor_parallel.h"
#include "train/checkpointing.h"
#include "train/config.h"
#include "train/peak_flops.h"
#include "train/metrics.h"
#include "train/run_lock.h"
#include "train/spike_detector.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace ndt {

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
  // False when the loss or the gradient norm was NaN or infinite on any rank (one
  // all-reduce of a flag, so every rank decides alike): the update was then not applied.
  bool finite = true;
  // Dynamic loss scaling (precision.loss_scaling): the scale this step's loss was
  // multiplied by, and whether a non-finite step was an overflow the scaler handled
  // (skipped, scale reduced, steps_done() advanced); otherwise a non-finite step did not
  // advance steps_done() and ends the run.
  float loss_scale = 1;
  bool overflow_skipped = false;
  // What the stability checks did (docs/stability.md), "" when nothing: a spike warned
  // of, an update skipped, a rollback.
  std::string intervention;
  // Mixture of experts (docs/moe.md), over the global batch and every MoE block: the
  // load-balancing and router z-loss terms the objective adds (means, like loss), the
  // fraction of token x slot assignments capacity dropped, and the assignments each
  // expert processed.
  double moe_aux_loss = 0, moe_z_loss = 0, moe_drop_rate = 0;
  std::vector<int64_t> moe_tokens_per_expert;
};

struct RunSummary {
  std::vector<double> losses;
  std::vector<std::pair<int64_t, double>> val_losses;  // (steps done, loss)
  double median_tokens_per_s = 0;
  double median_mfu = 0;
  double median_hfu = 0;
  double unigram_entropy = 0;  // nats per token of the training data
  std::string sample;
  bool stopped_by_signal = false;  // SIGTERM: stopped (and saved) before train.steps
  int64_t overflow_skipped_steps = 0;  // dynamic loss scaling: steps skipped for overflow
  int64_t spikes = 0;         // loss or gradient-norm spikes detected
  int64_t skipped_steps = 0;  // updates skipped by stability.on_spike / on_nonfinite = skip
  int64_t rollbacks = 0;
  int64_t zclips = 0;         // steps ZClip clipped (optim.clip_mode = zclip)
};

class Trainer {
 public:
  // mesh == nullptr: one rank, no communication. log == nullptr: silent (tests); with a
  // mesh only rank 0 logs and writes <out_dir>/metrics.jsonl.
  // Everything the run will need is checked here, before step 1: the config, every data
  // file's tokens, the folders it writes (rank 0 locks them: run_lock.h) and what they
  // hold (checkpoints of another run are never deleted unless checkpoint.overwrite), the
  // checkpoint to resume or the weights to start from. Collective; an error on any rank
  // is thrown on every rank (agreed_error.h).
  Trainer(const RunConfig& config, DeviceMesh* mesh, std::ostream* log);

  StepStats step();
  double evaluate();  // mean validation loss over train.eval_batches batches of train.batch_size rows
  // Trains to train.steps (or a SIGTERM), saves, evaluates and samples. A step whose
  // loss or gradient norm is not finite ends the run with an ndt::Error after saving
  // the last finite state (if checkpoints are on) under stability.on_nonfinite = stop;
  // skip and rollback go on (docs/stability.md), and too many rollbacks end it too. The final checkpoint is written
  // before the final evaluation and the sample, so neither can lose it.
  RunSummary run();

  Transformer& model() { return *model_; }
  // Every parameter's whole (logical) value, in store order (collective over the mesh).
  std::vector<float> full_parameters();
  int64_t steps_done() const { return step_; }
  const PipelineRunner* pipeline() const { return pipeline_.get(); }  // null without pp

  // Checkpoints (train/checkpointing.h): save the state after the steps done so far
  // (async: on a background thread, committed at a later step or by finish), and wait
  // for a save in flight to be committed. Collective.
  void save_checkpoint(bool async);
  void finish_checkpoints() { checkpoints_->finish(); }
  const TrainingCheckpoints& checkpoints() const { return *checkpoints_; }
  GradientSync& gradient_sync() { return *sync_; }
  const DynamicLossScaler* loss_scaler() const { return loss_scaler_.get(); }  // null: no loss scaling
  // From the next step on, the training data is `count` batches further on (what a
  // rollback does after reloading; tests use it for the run whose data lacks a window).
  void skip_batches(int64_t count);
  // Training batches skipped so far, as (first data position, count).
  const std::vector<std::pair<int64_t, int64_t>>& skipped_batches() const { return skipped_batches_; }

 private:
  [[noreturn]] void stop_on_non_finite(const StepStats& s);
  // The micro-batch of rows [row_begin, row_begin + rows) of this step's training batch
  // (data position step + batch offset) into inputs_ / targets_; debug.corrupt_batches.
  void fetch_train_batch(int row_begin, int rows);
  // stability.*: reload the newest checkpoint and skip the batches since it, or stop
  // after too many rollbacks (an error naming that checkpoint); before the first save,
  // only skip the update.
  void rollback(StepStats& s, const std::string& reason);
  // The states beside the tensors a checkpoint holds: fp8, the loss scaler, the spike
  // window, and on resume the data offset and the rollback record.
  void restore_states(const nlohmann::json& state, bool resume);
  void print_header();
  void print_step(const StepStats& s);
  // The MoE blocks' totals of this step, summed over the ranks, into s (MoE models only).
  void collect_moe_totals(StepStats& s);
  // The mean over the data- and context-parallel ranks (as f32); the array form
  // averages up to 2 values in one all-reduce, in place.
  double mean_over_dp(double local);
  void mean_over_dp(double* values, int n);
  // The tokens of a sequence of T this rank holds (T / cp).
  int local_tokens(int T) const;
  bool on_every_rank(bool local);  // collective: local is true on every rank
  void update_fp8_scales();          // precision.fp8: this step's amaxes, max over ranks, into the histories
  void inject_nonfinite_gradient();  // debug.nonfinite_gradient_step
  std::string describe_sync() const;  // how gradients are combined, for the header
  // The communicators the metrics and the summary report, each once.
  std::vector<Axis> reported_axes() const;
  nlohmann::json comm_record() const;
  // The metrics record that opens a run (and each resumed part of it): the resolved
  // config, the mesh, the model's size and the MFU peak (docs/report.md).
  nlohmann::json run_record() const;
  // Each tag's current bytes and its peak since the process started (the ledger's
  // peaks are never reset here: peak_mem_bytes is the peak since the start too).
  static nlohmann::json memory_record();
  // pipeline_timeline.json: every pp rank's measured actions of the last step. Collective
  // on pp (after the last step, so no step's counted communication changes); rank 0 writes.
  void write_pipeline_timeline();

  RunConfig config_;
  DeviceMesh* mesh_;
  int dp_size_ = 1, dp_rank_ = 0;
  int world_size() const { return mesh_ ? mesh_->world().size() : 1; }
  // Activation checkpointing or context parallelism recomputes part of forward (HFU > MFU).
  bool recomputes() const { return model_->recompute_flops_per_token(config_.seq_len) > 0; }
  int rows_per_rank_ = 0;  // of the global batch
  std::ostream* log_;
  std::unique_ptr<Transformer> model_;
  RunData data_;  // shards, loaders, the tokenizer (data/run_data.h)
  PeakFlops peak_;
  std::vector<std::unique_ptr<RunFolderLock>> locks_;  // rank 0; released last
  std::unique_ptr<MetricsLog> metrics_;  // opened once the run owns its folder
  std::unique_ptr<GradientSync> sync_;  // DDP (or one rank), or ZeRO
  std::unique_ptr<TrainingCheckpoints> checkpoints_;
  std::unique_ptr<DynamicLossScaler> loss_scaler_;  // precision.loss_scaling
  // Pipeline parallelism (parallel.pp > 1): the runner of this rank's chunks, and the
  // first and last pp ranks' communicator for a tied embedding's gradient.
  std::unique_ptr<PipelineRunner> pipeline_;
  std::unique_ptr<Communicator> tied_pair_;
  double pipeline_step(float grad_scale);  // the step's token-loss sum (shared over pp)
  double sum_over_pp(double value);
  void sum_tied_embedding_gradient();
  int64_t step_ = 0;
  // Stability: the data position of step s is s + batch_offset_ (skipped windows).
  SpikeDetector spikes_;
  int64_t batch_offset_ = 0;
  std::vector<std::pair<int64_t, int64_t>> skipped_batches_;
  std::vector<int64_t> rollback_steps_;  // the 1-based steps that rolled back
  int64_t lr_factor_until_ = 0;
  std::optional<std::pair<int64_t, int64_t>> corrupt_;  // debug.corrupt_batches
  struct {
    int64_t spikes = 0, skipped_steps = 0, rollbacks = 0, zclips = 0;
  } summary_counts_;
  std::unique_ptr<ZClip> zclip_;  // optim.clip_mode = zclip
  std::vector<int32_t> inputs_, targets_;
  MicroBatchContext ctx_;  // the micro-batch in flight
};

}  // namespace ndt
