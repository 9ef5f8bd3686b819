#include "train/trainer.h"

#include "checkpoint/directory.h"
#include "core/memory.h"
#include "core/system_memory.h"
#include "core/timing.h"
#include "kernels/kernels.h"
#include "offload/swap_file.h"
#include "parallel/expert/moe_totals.h"
#include "train/generate.h"
#include "train/init_from.h"
#include "train/memory_preflight.h"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cmath>

namespace ndt {

namespace {

// The config checked and resolved for the mesh and its nodes, which must be the mesh
// it describes.
RunConfig resolved_for(const RunConfig& config, DeviceMesh& mesh) {
  config.validate();
  NDT_CHECK(config.layout == LayoutMode::manual,
            "parallel.layout = \"auto\" is chosen before the trainer starts: train the config resolve_auto_layout "
            "returns (plan/auto_layout.h), as `ndtrain train` does");
  const NodeTopology& nodes = mesh.topology();
  const int my_node = nodes.node_of_rank[static_cast<size_t>(mesh.world().rank())];
  RunConfig resolved =
      config.resolved({mesh.world().size(), nodes.ranks_per_node(), nodes.ranks_on_node(my_node)});
  NDT_CHECK(mesh.shape().str() == resolved.mesh.str(), "the mesh {} does not match the config's {}",
            mesh.shape().str(), resolved.mesh.str());
  check_run_fits_in_memory(resolved, resolved.mesh, physical_memory_bytes());  // before anything allocates
  // Tensor parallelism (and Ulysses) communicates in every block: inside a node only.
  for (const auto& [axis, what] : {std::pair{Axis::tp, "parallel.tp"}, {Axis::cp, "parallel.cp (Ulysses)"},
                                   {Axis::cp_ulysses, "parallel.cp_ulysses (USP)"}}) {
    if (axis == Axis::cp && resolved.cp_mode != CpMode::ulysses) continue;
    if (axis == Axis::cp_ulysses && resolved.cp_mode != CpMode::usp) continue;
    NDT_CHECK(resolved.allow_cross_node_tp || mesh.nodes_spanned(axis) == 1,
              "{} = {}: its groups span {} nodes ({}), but they communicate in every block and need a node's own "
              "links: give each node a multiple of the group's ranks (the mesh puts tp innermost), or set "
              "parallel.allow_cross_node_tp = true",
              what, mesh.size(axis), mesh.nodes_spanned(axis), mesh.crossing_group(axis));
  }
  return resolved;
}

std::ostream* rank0(DeviceMesh& mesh, std::ostream* log) { return mesh.world().rank() == 0 ? log : nullptr; }

}  // namespace

Trainer::Trainer(const RunConfig& config, DeviceMesh& mesh, std::ostream* log)
    : config_(resolved_for(config, mesh)),
      mesh_(mesh),
      log_(rank0(mesh, log), config_),
      faults_(config_, mesh.world().size()),
      data_((kernels::set_num_threads(config_.threads), config_)),
      guard_(config_) {
  // The separator the data records, resolved once like the config's other defaults.
  if (data_.document_separator()) config_.document_separator = *data_.document_separator();
  locks_ = own_run_folders(config_, mesh_, rank0(mesh, log));
  checkpoints_ = std::make_unique<TrainingCheckpoints>(config_, mesh_, rank0(mesh, log));
  NDT_CHECK(config_.steps > 0 || checkpoints_->enabled(),
            "train.steps = 0 writes the initial state as a checkpoint, but there is no checkpoint folder: set "
            "checkpoint.dir or runtime.out_dir");
  model_ = std::make_unique<TrainingModel>(config_, mesh_);
  peak_ = resolve_run_peak_flops(config_.peak_gflops, config_.threads, config_.precision.compute, mesh_.world());
  log_.header(*model_, mesh_, data_, peak_);
  resume_or_initialise();
  checkpoints_->claim(resumed_step_, config_.overwrite);
  metrics_ = std::make_unique<MetricsWriter>(
      config_.out_dir.empty() || !leads() ? "" : config_.out_dir + "/metrics.jsonl", resumed_step_.has_value());
  if (config_.profile) profiler_.emplace(mesh_);
}

void Trainer::resume_or_initialise() {
  if (!config_.init_from.empty()) {
    const uint64_t bytes_read = load_initial_weights(config_.init_from, config_.model, model_->sync(), mesh_);
    log_.line(fmt::format("initialised from {} (fresh optimizer state, step 0; rank 0 read {:.1f} MB of weights)",
                          config_.init_from, static_cast<double>(bytes_read) / 1e6));
  }
  if (config_.resume.empty()) return;
  const std::filesystem::path dir = resolve_resume(config_.resume, checkpoints_->root());
  const nlohmann::json state = load_training_checkpoint(dir, model_->sync(), config_, mesh_);
  step_ = state.at("step").get<int64_t>();
  restore_states(state, /*resume=*/true);
  resumed_step_ = step_;
  NDT_CHECK(step_ < config_.steps, "checkpoint {} is at step {}: train.steps = {} leaves nothing to train", dir.string(),
            step_, config_.steps);
  log_.line(fmt::format("resumed from {} at step {} (saved on mesh {})", dir.string(), step_, state.value("mesh", "?")));
  const int64_t saved_decay = state.at("schedule").value("decay_steps", int64_t{0});
  if (saved_decay != config_.schedule.decay_steps) {
    log_.line(fmt::format("note: this run's learning rate decays over {} steps, the checkpoint's run over {} (set "
                          "optim.decay_steps = {} to continue its schedule)",
                          config_.schedule.decay_steps, saved_decay, saved_decay));
  }
}

void Trainer::save_checkpoint(bool async) {
  nlohmann::json state = training_state(config_, step_, model_->sync(), mesh_);
  if (const Fp8Linears* fp8 = model().fp8()) state["fp8_scaling"] = fp8->state();
  guard_.save(state);
  data_.save(state);
  checkpoints_->save(step_, model_->sync(), state, async);
}

void Trainer::restore_states(const nlohmann::json& state, bool resume) {
  if (model().fp8() && state.contains("fp8_scaling")) {  // else (saved without fp8): fresh histories
    model().fp8()->restore(state.at("fp8_scaling").get<std::vector<float>>());
  }
  guard_.restore(state, resume);
  // A rollback keeps what it knows of the data skipped; a resume takes the checkpoint's.
  if (resume) data_.restore(state);
}

FetchRows Trainer::train_rows(int64_t position) const {
  return [this, position](int row_begin, int rows, int32_t* inputs, int32_t* targets) {
    data_.train_rows(position, row_begin, rows, inputs, targets);
    faults_.corrupt_rows(position, row_begin, rows, inputs, targets);
  };
}

StepStats Trainer::step() {
  if (profiler_) profiler_->begin();
  const auto t0 = std::chrono::steady_clock::now();
  set_comm_step(step_);
  GradientSync& sync = model_->sync();
  // Every rank scales by the global count of the targets that count (B x T without loss
  // masks; the data gives it, so no rank waits for another): the sum over ranks is the
  // global mean; and, with dynamic loss scaling, by the loss scale.
  const float loss_scale = guard_.loss_scale();
  const int64_t counted = data_.train_targets(data_.position(step_));
  const float grad_scale = loss_scale / static_cast<float>(std::max<int64_t>(counted, 1));
  const double exposed_before = sync.exposed_wait_seconds();
  const offload::IoCounters io_before = offload::io_counters();
  const MicroBatchLosses sums = model_->compute_gradients(train_rows(data_.position(step_)), grad_scale);
  StepStats s;
  s.step = step_;
  collect_moe_totals(s);
  const std::array<double, 2> means = mean_losses(sums, counted);
  update_fp8_scales();
  if (auto note = faults_.corrupt_gradient(step_ + 1, mesh_.world().rank(), model().store(), sync)) log_.line(*note);
  // The gradients hold loss_scale x the true ones: the norm, the clip and the update
  // divide it out.
  const double norm = sync.grad_norm() / loss_scale;
  // After a rollback, stability.rollback_lr_factor for stability.rollback_lr_steps steps.
  const float lr = config_.schedule.at(step_) * guard_.lr_factor(step_);
  s.loss_scale = loss_scale;
  s.finite = on_every_rank(std::isfinite(means[0]) && std::isfinite(norm));
  const StepDecision decision = guard_.decide(means[0], norm, s.finite);
  if (decision.applies()) sync.step(lr, decision.clip_factor / loss_scale);
  if (decision.advances()) ++step_;
  s.loss = means[0];
  if (config_.z_loss > 0) s.z_loss = means[1];
  s.lr = lr;
  s.grad_norm = norm;
  s.overflow_skipped = decision.overflow;
  s.next_loss_scale = guard_.loss_scale();
  apply_decision(decision, s);
  finish_step_stats(s, seconds_since(t0), exposed_before, io_before);
  if (profiler_) s.profile = profiler_->end_slowest(s.seconds);
  metrics_->step(s, config_, mesh_, model_->pipeline());
  return s;
}

void Trainer::finish_step_stats(StepStats& s, double seconds, double exposed_before,
                                const offload::IoCounters& io_before) {
  const Transformer& m = model();
  const int T = config_.seq_len;
  s.seconds = seconds;
  s.tokens_per_s = static_cast<double>(config_.batch_size) * T / s.seconds;
  s.mfu = m.flops_per_token(T) * s.tokens_per_s / (peak_.flops_per_s * mesh_.world().size());
  s.hfu = s.mfu * (1.0 + m.recompute_flops_per_token(T) / m.flops_per_token(T));
  s.peak_bytes = MemoryLedger::instance().peak_total();
  s.comm_wait_seconds = model_->sync().exposed_wait_seconds() - exposed_before;
  const offload::IoCounters io = offload::io_counters() - io_before;
  s.io_read_bytes = io.read_bytes;
  s.io_write_bytes = io.write_bytes;
  s.io_wait_seconds = io.wait_seconds;
}

void Trainer::collect_moe_totals(StepStats& s) {
  if (!config_.model.is_moe()) return;
  const MoeJobTotals totals = sum_moe_totals(model().take_moe_totals(), config_.model.n_experts, mesh_);
  const double tokens = static_cast<double>(config_.batch_size) * config_.seq_len;
  s.moe_aux_loss = totals.aux_sum / tokens;
  s.moe_z_loss = totals.z_sum / tokens;
  s.moe_drop_rate = totals.assignments > 0 ? totals.dropped / totals.assignments : 0.0;
  s.moe_tokens_per_expert = totals.tokens_per_expert;
  s.moe_expert_load = totals.expert_load;
}

std::array<double, 2> Trainer::mean_losses(const MicroBatchLosses& sums, int64_t counted) {
  const int n = config_.z_loss > 0 ? 2 : 1;  // the z term (optim.z_loss) in the same all-reduce
  if (!config_.loss_mask) {
    // Every micro-batch holds B x T / (accum x dp) targets: the mean of the means is the mean.
    const int accum = config_.micro_batches();
    std::array<double, 2> means = {sums.loss / accum, sums.z_loss / accum};
    reduce_over_dp(means.data(), n, ReduceOp::avg);
    return means;
  }
  // Micro-batches hold different counts: the global sum over the global count.
  std::array<double, 2> totals = {sums.loss_sum, sums.z_loss_sum};
  reduce_over_dp(totals.data(), n, ReduceOp::sum);
  for (double& t : totals) t /= static_cast<double>(std::max<int64_t>(counted, 1));
  return totals;
}

void Trainer::reduce_over_dp(double* values, int n, ReduceOp op) {
  Communicator& dp_cp = mesh_.axis(Axis::dp_cp);
  if (dp_cp.size() == 1) return;
  std::array<float, 2> buffer{};
  NDT_CHECK(n >= 1 && n <= static_cast<int>(buffer.size()), "reduce_over_dp: {} values", n);
  for (int i = 0; i < n; ++i) buffer[static_cast<size_t>(i)] = static_cast<float>(values[i]);
  // Over the context-parallel ranks too: each holds part of every sequence's tokens.
  dp_cp.all_reduce(buffer.data(), static_cast<size_t>(n), DType::f32, op);
  for (int i = 0; i < n; ++i) values[i] = buffer[static_cast<size_t>(i)];
}

bool Trainer::on_every_rank(bool local) {
  float failed = local ? 0.0f : 1.0f;
  mesh_.world().all_reduce(&failed, 1, DType::f32, ReduceOp::max);
  return failed == 0.0f;
}

void Trainer::update_fp8_scales() {
  Fp8Linears* fp8 = model().fp8();
  if (!fp8) return;
  // Every rank saw part of each tensor (its rows of the batch, its tp block of a weight,
  // its pipeline stage's layers): the max over all ranks is the whole tensor's amax.
  std::vector<float>& amax = fp8->step_amax();
  mesh_.world().all_reduce(amax.data(), amax.size(), DType::f32, ReduceOp::max);
  fp8->finish_step();
}

double Trainer::evaluate() { return *run_evaluation(/*stoppable=*/false); }

std::optional<double> Trainer::run_evaluation(bool stoppable) {
  // The validation set is train.eval_batches global batches of train.batch_size rows,
  // split over the data-parallel ranks and into micro-batches like a training batch: the
  // same rows, so the same loss, on any mesh.
  model().store().refresh_compute();
  MicroBatchLosses total;
  int64_t counted = 0;
  for (int b = 0; b < config_.eval_batches; ++b) {
    if (stoppable && stop_agreed()) return std::nullopt;
    const MicroBatchLosses batch = model_->evaluate([this, b](int row_begin, int rows, int32_t* inputs,
                                                              int32_t* targets) {
      data_.eval_rows(b, row_begin, rows, inputs, targets);
    });
    total.loss += batch.loss, total.loss_sum += batch.loss_sum;
    counted += data_.eval_targets(b);
  }
  if (config_.loss_mask) {
    reduce_over_dp(&total.loss_sum, 1, ReduceOp::sum);
    return total.loss_sum / static_cast<double>(std::max<int64_t>(counted, 1));
  }
  double mean = total.loss / (config_.eval_batches * config_.micro_batches());
  reduce_over_dp(&mean, 1, ReduceOp::avg);
  return mean;
}

bool Trainer::stop_agreed() {
  int32_t signal = stop_signal();
  if (mesh_.world().size() > 1) mesh_.world().all_reduce(&signal, 1, DType::i32, ReduceOp::max);
  if (signal != 0) stop_signal_ = signal;
  return signal != 0;
}

StepBoundary Trainer::boundary() {
  // (A rollback to a checkpoint's step does not save that step again.)
  if (config_.checkpoint_every > 0 && step_ % config_.checkpoint_every == 0 && step_ < config_.steps &&
      checkpoints_->last_saved_step() != step_) {
    save_checkpoint(config_.checkpoint_async);
  }
  const StepBoundary b = checkpoints_->poll({stop_signal(), metrics_->failure().has_value()});
  if (b.stop_signal != 0) stop_signal_ = b.stop_signal;
  return b;
}

void Trainer::expect_layout(const LayoutPrediction& prediction) {
  layout_check_.emplace(prediction, config_.layout_check_steps);
}

RunSummary Trainer::run() {
  RunSummary summary;
  summary.unigram_entropy = data_.data().unigram_entropy();
  std::vector<double> rates, mfus, hfus;
  install_stop_handler();
  metrics_->run(config_, mesh_.shape(), mesh_.world().size(), step_, peak_);
  while (step_ < config_.steps) {
    StepStats s;
    try {
      s = step();
    } catch (const offload::SwapError& e) {
      stop_on_swap_failure(e);
    }
    if (!s.finite && !s.overflow_skipped && config_.on_nonfinite == NonfiniteAction::stop) stop_on_non_finite(s);
    log_.events(s);
    summary.losses.push_back(s.loss);
    // The first step pays for first-touch page faults; leave it out of the medians.
    if (s.step > 0 || config_.steps == 1) rates.push_back(s.tokens_per_s), mfus.push_back(s.mfu), hfus.push_back(s.hfu);
    const StepBoundary b = boundary();
    if (b.metrics_failed) stop_on_metrics_failure();
    if (b.stop_signal != 0) {
      log_.line(fmt::format("stop requested ({}) after step {}: {}", stop_signal_name(b.stop_signal), step_,
                            checkpoints_->enabled() ? "saving and stopping"
                                                    : "stopping (checkpoints are off: nothing is saved)"));
      if (s.step % config_.log_every != 0) log_.step(s);
      if (rates.empty()) rates.push_back(s.tokens_per_s), mfus.push_back(s.mfu), hfus.push_back(s.hfu);
      summary.stopped_by_signal = true;
      break;
    }
    const bool last = step_ == config_.steps;
    if (s.step % config_.log_every == 0 || last) log_.step(s);
    if (layout_check_) {
      if (const std::optional<LayoutCheckResult> check = layout_check_->observe(s.step, s.seconds, last)) {
        log_.line(check->describe(step_));
        metrics_->layout_check(*check, step_);
      }
    }
    if (config_.eval_every > 0 && step_ % config_.eval_every == 0 && !last) {
      const std::optional<double> val = run_evaluation(/*stoppable=*/true);
      if (!val) {
        log_.line(fmt::format("stop requested ({}) during the validation after step {}: saving and stopping",
                              stop_signal_name(stop_signal_), step_));
        summary.stopped_by_signal = true;
        break;
      }
      summary.val_losses.emplace_back(step_, *val);
      metrics_->validation(step_, *val);
      log_.validation(step_, *val);
    }
  }
  summary.median_tokens_per_s = median(rates);
  summary.median_mfu = median(mfus);
  summary.median_hfu = median(hfus);
  finish_run(summary);
  return summary;
}

void Trainer::finish_run(RunSummary& summary) {
  if (config_.profile && !summary.losses.empty()) {
    summary.peak_flops_at_end =
        resolve_run_peak_flops(config_.peak_gflops, config_.threads, config_.precision.compute, mesh_.world()).flops_per_s;
  }
  // The final checkpoint comes before the final evaluation and the sample: an error in
  // either cannot lose it.
  if (config_.save_on_exit && checkpoints_->enabled() && checkpoints_->last_saved_step() != step_) {
    save_checkpoint(/*async=*/false);
  }
  checkpoints_->finish();
  if (config_.steps == 0) {
    log_.line(fmt::format("train.steps = 0: the initial state is saved in {}",
                          (checkpoints_->root() / ckpt::checkpoint_dir_name(0)).string()));
  }
  // A stopped run (a scheduler's grace period is short) skips the final evaluation and
  // the sample; a stop during the final evaluation ends it (the state is saved).
  if (!summary.stopped_by_signal) {
    if (const std::optional<double> val = run_evaluation(/*stoppable=*/true)) {
      summary.val_losses.emplace_back(step_, *val);
      metrics_->validation(step_, *val);
      log_.validation(step_, *val);
    } else {
      log_.line(fmt::format("stop requested ({}) during the final evaluation: it is left out", stop_signal_name(stop_signal_)));
      summary.stopped_by_signal = true;
    }
  }
  summary.stop_signal = summary.stopped_by_signal ? stop_signal_ : 0;
  summary.overflow_skipped_steps = loss_scaler() ? loss_scaler()->skipped_steps() : 0;
  summary.final_loss_scale = guard_.loss_scale();
  summary.spikes = counts_.spikes;
  summary.skipped_steps = counts_.skipped_steps;
  summary.rollbacks = counts_.rollbacks;
  summary.zclips = counts_.zclips;
  summary.data_mix = data_.data().mix_record(step_);
  sample(summary);
  metrics_->summary(summary, mesh_);
  log_.summary(summary, mesh_, *model_, data_.skipped_total());
  if (summary.stopped_by_signal) {
    log_.line(fmt::format("\nstopped by {} after step {} of {}: {}", stop_signal_name(summary.stop_signal), step_,
                          config_.steps,
                          checkpoints_->enabled()
                              ? fmt::format("the state is saved in {}; continue with --resume",
                                            (checkpoints_->root() / ckpt::checkpoint_dir_name(step_)).string())
                              : std::string("checkpoints are off, so the state is lost")));
  }
  // After the summary, so its counters (and every step's) leave out the gather.
  if (model_->pipeline() && !summary.losses.empty()) {
    const auto timeline = model_->pipeline()->gather_last_step_timeline();
    if (leads() && !config_.out_dir.empty()) {
      MetricsWriter::pipeline_timeline(config_.out_dir, timeline, step_, config_, model_->pipeline()->shape());
    }
  }
  if (checkpoints_->poll({0, metrics_->failure().has_value()}).metrics_failed) stop_on_metrics_failure();
}

void Trainer::sample(RunSummary& summary) {
  // Every rank samples (the same tokens): under FSDP the forward pass is collective.
  // Sampling runs on a context of the model's own: the training context goes first, so
  // the activation peak stays the training one.
  model_->release_context();
  if (config_.sample_tokens == 0 || summary.stopped_by_signal) return;
  if (model_->pipeline()) {
    log_.line("note: no sample: sampling runs the whole model on each rank, which pipeline parallelism splits (sample "
              "from the final checkpoint with `ndtrain generate`)");
    return;
  }
  const SampleOptions options{config_.sample_tokens, config_.temperature, config_.top_k, config_.seed};
  model().store().refresh_compute();
  summary.sample = data_.text().decode(generate(model(), data_.text().encode(config_.sample_prompt), options));
}

}  // namespace ndt
