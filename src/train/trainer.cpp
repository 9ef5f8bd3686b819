#include "train/trainer.h"

#include "parallel/expert_parallel.h"
#include "parallel/memory_model.h"
#include "parallel/parallelize.h"

#include "checkpoint/directory.h"
#include "core/memory.h"
#include "core/output_file.h"
#include "core/rng.h"
#include "core/system_memory.h"
#include "core/timing.h"
#include "kernels/kernels.h"
#include "optim/clip.h"
#include "optim/weight_decay.h"
#include "train/agreed_error.h"
#include "train/generate.h"
#include "train/init_from.h"
#include "train/memory_preflight.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <thread>

namespace ndt {

namespace {

double mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

RunConfig with_schedule_length(RunConfig config) {
  if (config.schedule.decay_steps == 0) config.schedule.decay_steps = std::max<int64_t>(config.steps, 1);
  return config;
}

// Every token of a shard must index the embedding: checked before step 1, not when the
// bad row is first drawn (for validation data: at the first evaluation, hours in).
void check_tokens(const TokenDataset& data, const char* key, const std::string& path, int vocab_size) {
  const uint16_t* tokens = data.tokens();
  for (int64_t i = 0; i < data.size(); ++i) {
    NDT_CHECK(tokens[i] < vocab_size, "{} = \"{}\": token {} at position {} is outside model.vocab_size = {}", key,
              path, tokens[i], i, vocab_size);
  }
}

}  // namespace

double unigram_entropy(const uint16_t* tokens, int64_t n) {
  std::vector<int64_t> counts(65536, 0);
  for (int64_t i = 0; i < n; ++i) ++counts[tokens[i]];
  double h = 0;
  for (int64_t c : counts) {
    if (c > 0) {
      const double p = static_cast<double>(c) / static_cast<double>(n);
      h -= p * std::log(p);
    }
  }
  return h;
}

namespace {

// Threads when runtime.threads = 0: the node's cores divided among the ranks on it.
int automatic_threads(int world_size) {
  int local_ranks = world_size;
  if (const char* env = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) local_ranks = std::max(1, std::atoi(env));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / local_ranks);
}

// Rank 0 of the job (or the only rank) logs, writes metrics and prints the sample.
bool leads(DeviceMesh* mesh) { return mesh == nullptr || mesh->world().rank() == 0; }

}  // namespace

Trainer::Trainer(const RunConfig& config, DeviceMesh* mesh, std::ostream* log)
    : config_(with_schedule_length(config)),
      mesh_(mesh),
      log_(leads(mesh) ? log : nullptr),
      train_data_({config.train_data}),
      train_loader_(train_data_, config.batch_size, config.seq_len, config.seed),
      spikes_(config.spike) {
  config_.validate();
  corrupt_ = parse_batch_window(config_.corrupt_batches);
  if (config_.clip_mode == "zclip") zclip_ = std::make_unique<ZClip>(config_.zclip);
  if (mesh_) {
    const MeshShape expected = config_.resolve_mesh(mesh_->world().size());
    NDT_CHECK(mesh_->shape().str() == expected.str(), "the mesh {} does not match the config's {}",
              mesh_->shape().str(), expected.str());
    dp_size_ = mesh_->size(Axis::dp);
    dp_rank_ = mesh_->coord(Axis::dp);
  } else {
    config_.resolve_mesh(1);
  }
  rows_per_rank_ = config_.batch_size / dp_size_;
  NDT_CHECK(config_.nonfinite_gradient_rank < world_size(), "debug.nonfinite_gradient_rank = {} is not a rank of the {}",
            config_.nonfinite_gradient_rank, world_size() == 1 ? std::string("single-rank run") :
            fmt::format("{} ranks", world_size()));
  if (config_.scales_loss()) loss_scaler_ = std::make_unique<DynamicLossScaler>(config_.loss_scale);
  if (config_.micro_batch_size == 0) config_.micro_batch_size = rows_per_rank_;
  check_run_fits_in_memory(config_, config_.resolve_mesh(world_size()), physical_memory_bytes());
  if (config_.threads == 0) config_.threads = automatic_threads(mesh_ ? mesh_->world().size() : 1);
  kernels::set_num_threads(config_.threads);
  check_tokens(train_data_, "data.train", config_.train_data, config_.model.vocab_size);
  if (!config_.val_data.empty()) {
    val_data_ = std::make_unique<TokenDataset>(std::vector<std::string>{config_.val_data});
    check_tokens(*val_data_, "data.val", config_.val_data, config_.model.vocab_size);
  }
  val_loader_ = std::make_unique<BatchLoader>(val_data_ ? *val_data_ : train_data_, config_.batch_size,
                                              config_.seq_len, config_.seed);
  locks_ = own_run_folders(config_, mesh_, log_);
  checkpoints_ = std::make_unique<TrainingCheckpoints>(config_, mesh_, log_);
  NDT_CHECK(config_.steps > 0 || checkpoints_->enabled(),
            "train.steps = 0 writes the initial state as a checkpoint, but there is no checkpoint folder: set "
            "checkpoint.dir or runtime.out_dir");
  // Built without parameter memory: parallelize() places the parameters first.
  model_ = std::make_unique<Transformer>(config_.model, config_.seed, config_.loss_chunk_rows,
                                         /*materialize_parameters=*/false);
  apply_weight_decay_policy(model_->store(), config_.weight_decay_policy);
  model_->set_activation_checkpointing(config_.activation_checkpointing);
  model_->set_precision(config_.precision);
  model_->set_z_loss(config_.z_loss);
  ParallelOptions options{config_.zero_stage, static_cast<size_t>(config_.bucket_mb * 1024 * 1024),
                          config_.reshard_after_forward, config_.prefetch, config_.sequence_parallel,
                          cp_mode_from_name(config_.cp_mode), cp_chunks_from_name(config_.cp_chunks), config_.adamw,
                          config_.reduce_dtype};
  const int pp = mesh_ ? mesh_->size(Axis::pp) : 1;
  std::optional<PipelineStages> stages;
  if (pp > 1) {
    stages = partition_pipeline(config_.model, config_.seq_len, pp * config_.pp_virtual_stages,
                                parse_pipeline_layers(config_.pp_layers));
    options.local_units = stages->local_units(mesh_->coord(Axis::pp), pp);
  }
  sync_ = parallelize(*model_, mesh_, options);
  if (pp > 1) {
    Communicator& pp_comm = mesh_->axis(Axis::pp);
    const PipelineShape shape{pp, config_.pp_virtual_stages, rows_per_rank_ / config_.micro_batch_size};
    pipeline_ = std::make_unique<PipelineRunner>(*model_, pp_comm, pipeline_schedule_from_name(config_.pp_schedule),
                                                 shape, *stages, sync_.get());
    if (config_.model.tied_embeddings) {
      const bool end = pp_comm.rank() == 0 || pp_comm.rank() == pp - 1;
      tied_pair_ = pp_comm.split(end ? 0 : 1, pp_comm.rank(), "pp");
    }
  }
  peak_ = resolve_peak_flops(config_.peak_gflops, config_.threads, config_.precision.compute);
  const size_t rows = static_cast<size_t>(config_.micro_batch_size) * config_.seq_len;
  inputs_.resize(rows);
  targets_.resize(rows);
  if (log_) print_header();
  std::optional<int64_t> resumed_step;
  if (!config_.resume.empty()) {
    const std::filesystem::path dir = resolve_resume(config_.resume, checkpoints_->root());
    const nlohmann::json state = load_training_checkpoint(dir, *sync_, config_, mesh_);
    step_ = state.at("step").get<int64_t>();
    restore_states(state, /*resume=*/true);
    resumed_step = step_;
    NDT_CHECK(step_ < config_.steps, "checkpoint {} is at step {}: train.steps = {} leaves nothing to train", dir.string(),
              step_, config_.steps);
    if (log_) fmt::print(*log_, "resumed from {} at step {} (saved on mesh {})\n", dir.string(), step_,
                         state.value("mesh", "?"));
    const int64_t saved_decay = state.at("schedule").value("decay_steps", int64_t{0});
    if (log_ && saved_decay != config_.schedule.decay_steps) {
      fmt::print(*log_, "note: this run's learning rate decays over {} steps, the checkpoint's run over {} (set "
                 "optim.decay_steps = {} to continue its schedule)\n",
                 config_.schedule.decay_steps, saved_decay, saved_decay);
    }
  } else if (!config_.init_from.empty()) {
    load_initial_weights(config_.init_from, config_.model, *sync_, mesh_);
    if (log_) fmt::print(*log_, "initialised from {} (fresh optimizer state, step 0)\n", config_.init_from);
  }
  checkpoints_->claim(resumed_step, config_.overwrite);
  metrics_ = std::make_unique<MetricsLog>(config_.out_dir.empty() || !leads(mesh_) ? "" : config_.out_dir + "/metrics.jsonl",
                                          resumed_step.has_value());
}

std::vector<float> Trainer::full_parameters() {
  // This rank's blocks -> whole over ep -> whole over tp.
  const std::vector<float> local =
      gather_expert_parallel(model_->store(), sync_->full_parameters().data(), mesh_ ? &mesh_->axis(Axis::ep) : nullptr);
  std::vector<float> full =
      gather_tensor_parallel(model_->store(), local.data(), TensorParallel{mesh_ ? &mesh_->axis(Axis::tp) : nullptr});
  if (!pipeline_) return full;
  // Each stage filled its own parameters (zeros elsewhere; a tied embedding's copy on the
  // last stage cleared): the sum over pp is the whole model.
  int64_t offset = 0;
  for (const Parameter& p : model_->store().params()) {
    const int64_t n = shape_numel(p.spec.logical_shape);
    if (p.pipeline_copy) std::fill(full.begin() + offset, full.begin() + offset + n, 0.0f);
    offset += n;
  }
  mesh_->axis(Axis::pp).all_reduce(full.data(), full.size(), DType::f32, ReduceOp::sum);
  return full;
}

void Trainer::save_checkpoint(bool async) {
  nlohmann::json state = training_state(config_, step_, *sync_, mesh_);
  if (loss_scaler_) {
    const LossScalerState ls = loss_scaler_->state();
    state["loss_scaler"] = {{"scale", ls.scale}, {"clean_steps", ls.clean_steps}, {"skipped", ls.skipped}};
  }
  if (const Fp8Linears* fp8 = model_->fp8()) state["fp8_scaling"] = fp8->state();
  nlohmann::json skipped = nlohmann::json::array();
  for (const auto& [first, count] : skipped_batches_) skipped.push_back({first, count});
  if (zclip_) state["zclip"] = zclip_->state();
  state["stability"] = {{"batch_offset", batch_offset_},
                        {"skipped_batches", skipped},
                        {"rollback_steps", rollback_steps_},
                        {"lr_factor_until", lr_factor_until_},
                        {"spike_window", spikes_.state()}};
  checkpoints_->save(step_, *sync_, state, async);
}

void Trainer::restore_states(const nlohmann::json& state, bool resume) {
  if (model_->fp8() && state.contains("fp8_scaling")) {  // else (saved without fp8): fresh histories
    model_->fp8()->restore(state.at("fp8_scaling").get<std::vector<float>>());
  }
  if (loss_scaler_ && state.contains("loss_scaler")) {  // else (saved without scaling): the initial scale
    const nlohmann::json& ls = state.at("loss_scaler");
    loss_scaler_->restore({ls.at("scale").get<double>(), ls.at("clean_steps").get<int>(),
                           ls.at("skipped").get<int64_t>()});
  }
  if (zclip_ && state.contains("zclip")) zclip_->restore(state.at("zclip").get<std::vector<double>>());
  if (!state.contains("stability")) return;  // saved before the stability state existed
  const nlohmann::json& st = state.at("stability");
  spikes_.restore(st.at("spike_window").get<std::vector<double>>());
  // A rollback keeps what it knows of the data skipped and the rollbacks since; a
  // resume takes the run's record from the checkpoint.
  if (!resume) return;
  batch_offset_ = st.at("batch_offset").get<int64_t>();
  skipped_batches_.clear();
  for (const nlohmann::json& w : st.at("skipped_batches")) skipped_batches_.emplace_back(w.at(0), w.at(1));
  rollback_steps_ = st.at("rollback_steps").get<std::vector<int64_t>>();
  lr_factor_until_ = st.at("lr_factor_until").get<int64_t>();
}

void Trainer::skip_batches(int64_t count) {
  NDT_CHECK(count >= 0, "skip_batches: {} batches", count);
  if (count == 0) return;
  skipped_batches_.emplace_back(step_ + batch_offset_, count);
  batch_offset_ += count;
}

void Trainer::fetch_train_batch(int row_begin, int rows) {
  const int64_t batch = step_ + batch_offset_;
  train_loader_.train_batch(batch, row_begin, rows, inputs_.data(), targets_.data());
  if (!corrupt_ || batch < corrupt_->first || batch >= corrupt_->first + corrupt_->second) return;
  // debug.corrupt_batches: random inputs and one target token for the whole batch, a
  // function of (seed, batch, position) alone: every row pulls the same way, so the
  // loss and the gradient norm both jump.
  const int64_t n = int64_t{rows} * config_.seq_len, base = (batch * config_.batch_size + row_begin) * config_.seq_len;
  const int32_t target =
      static_cast<int32_t>(philox(config_.seed, hash_name("corrupt-target"), static_cast<uint64_t>(batch))[0] %
                           config_.model.vocab_size);
  for (int64_t i = 0; i < n; ++i) {
    const auto words = philox(config_.seed, hash_name("corrupt-batch"), static_cast<uint64_t>(base + i));
    inputs_[static_cast<size_t>(i)] = static_cast<int32_t>(words[0] % config_.model.vocab_size);
    targets_[static_cast<size_t>(i)] = target;
  }
}

void Trainer::rollback(StepStats& s, const std::string& reason) {
  const int64_t at = s.step + 1;  // the 1-based step that failed
  int64_t recent = 0;
  for (int64_t r : rollback_steps_) recent += r > at - config_.rollback_window;
  checkpoints_->finish();
  const std::optional<std::filesystem::path> latest = ckpt::latest_checkpoint(checkpoints_->root());
  if (!latest) {  // before the first save: nothing to go back to, so the update is only skipped
    step_ = s.step + 1;
    ++summary_counts_.skipped_steps;
    s.intervention = "no checkpoint to roll back to yet, so the update is skipped on every rank: " + reason;
    return;
  }
  if (recent >= config_.max_rollbacks) {
    fail("step {}: {}; {}, so the run stops. The newest checkpoint, {}, holds a state from before the trouble: look at "
         "the data after it (batch {}) or lower optim.lr (now {}), then resume with --resume",
         at, reason,
         fmt::format("this would be rollback {} within {} steps (stability.max_rollbacks = {})", recent + 1,
                     config_.rollback_window, config_.max_rollbacks),
         latest->string(), s.step + batch_offset_, config_.schedule.max_lr);
  }
  const nlohmann::json state = load_training_checkpoint(*latest, *sync_, config_, mesh_);
  const int64_t to = state.at("step").get<int64_t>();
  restore_states(state, /*resume=*/false);
  // The batches of steps to .. s.step (those that led here), and
  // stability.rollback_extra_batches after them, are skipped: from now on the data is
  // that many batches further on.
  const int64_t first = to + batch_offset_, count = s.step + 1 - to + config_.rollback_extra_batches;
  step_ = to;
  skip_batches(count);
  rollback_steps_.push_back(at);
  lr_factor_until_ = to + config_.rollback_lr_steps;
  ++summary_counts_.rollbacks;
  s.intervention = fmt::format("rolled back to step {} ({}) and skipped training batches {}..{}: {}", to,
                               latest->string(), first, first + count - 1, reason);
}

std::string Trainer::describe_sync() const {
  const size_t n = sync_->bucket_count();
  if (config_.zero_stage >= 2) {
    return fmt::format("ZeRO stage {}, {} units (the root and each block)", config_.zero_stage, n);
  }
  return fmt::format("{}{} gradient bucket{} of >= {} MiB",
                     config_.zero_stage == 1 ? "ZeRO stage 1, " : "", n, n == 1 ? "" : "s", config_.bucket_mb);
}

int Trainer::local_tokens(int T) const { return mesh_ ? T / mesh_->size(Axis::cp) : T; }

double Trainer::mean_over_dp(double local) {
  mean_over_dp(&local, 1);
  return local;
}

void Trainer::mean_over_dp(double* values, int n) {
  if (mesh_ == nullptr || mesh_->size(Axis::dp_cp) == 1) return;
  std::array<float, 2> buffer{};
  NDT_CHECK(n >= 1 && n <= static_cast<int>(buffer.size()), "mean_over_dp: {} values", n);
  for (int i = 0; i < n; ++i) buffer[static_cast<size_t>(i)] = static_cast<float>(values[i]);
  // Over the context-parallel ranks too: each holds as many of a sequence's tokens.
  mesh_->axis(Axis::dp_cp).all_reduce(buffer.data(), static_cast<size_t>(n), DType::f32, ReduceOp::avg);
  for (int i = 0; i < n; ++i) values[i] = buffer[static_cast<size_t>(i)];
}

std::vector<Axis> Trainer::reported_axes() const {
  // Without cp, dp_cp and dp_shard_cp are dp's and dp_shard's communicators themselves.
  std::vector<Axis> axes = {Axis::dp, Axis::dp_shard, Axis::dp_replicate, Axis::tp, Axis::pp};
  if (mesh_->size(Axis::cp) > 1) axes = {Axis::dp_cp, Axis::dp_shard_cp, Axis::dp, Axis::dp_shard, Axis::dp_replicate, Axis::cp, Axis::tp, Axis::pp};
  // With ep > 1, its groups (edp is dp_cp's communicator otherwise, edp_shard dp_shard_cp's).
  if (mesh_->size(Axis::ep) > 1) axes.insert(axes.end(), {Axis::ep, Axis::edp, Axis::edp_shard});
  return axes;
}

nlohmann::json Trainer::comm_record() const {
  nlohmann::json record = nlohmann::json::object();
  if (!mesh_) return record;
  for (Axis axis : reported_axes()) {
    const CommStats& stats = mesh_->axis(axis).stats();
    nlohmann::json ops = nlohmann::json::object();
    for (size_t op = 0; op < kNumCommOps; ++op) {
      const CommCounter& c = stats.ops[op];
      if (c.calls == 0) continue;
      ops[std::string(comm_op_name(static_cast<CommOp>(op)))] = {
          {"calls", c.calls}, {"wire_bytes", c.wire_bytes}, {"wait_s", c.wait_seconds}};
    }
    if (!ops.empty()) record[std::string(axis_name(axis))] = ops;
  }
  return record;
}

nlohmann::json Trainer::run_record() const {
  nlohmann::json config = nlohmann::json::object();
  for (const auto& [key, value] : run_config_values(config_)) config[key] = value;
  const MeshShape shape = mesh_ ? mesh_->shape() : config_.mesh;
  nlohmann::json run = {{"start_step", step_},
                        {"resumed", !config_.resume.empty()},
                        {"world_size", world_size()},
                        {"mesh",
                         {{"pp", shape.pp},
                          {"dp_replicate", shape.dp_replicate},
                          {"dp_shard", shape.dp_shard},
                          {"cp", shape.cp},
                          {"tp", shape.tp},
                          {"ep", shape.ep}}},
                        {"parameters", count_parameters(config_.model)},
                        {"peak_flops", peak_.flops_per_s},
                        {"peak_flops_source", peak_.source},
                        {"config", config}};
  return {{"run", run}};
}

nlohmann::json Trainer::memory_record() {
  const MemoryLedger& ledger = MemoryLedger::instance();
  nlohmann::json mem = nlohmann::json::object();
  for (size_t t = 0; t < kNumMemTags; ++t) {
    const MemTag tag = static_cast<MemTag>(t);
    mem[std::string(mem_tag_name(tag))] = {{"current", ledger.current(tag)}, {"peak", ledger.peak(tag)}};
  }
  return mem;
}

void Trainer::write_pipeline_timeline() {
  const std::vector<std::vector<TimedPipelineAction>> timeline = pipeline_->gather_last_step_timeline();
  if (!leads(mesh_) || config_.out_dir.empty()) return;
  nlohmann::json ranks = nlohmann::json::array();
  for (const std::vector<TimedPipelineAction>& rank : timeline) {
    nlohmann::json actions = nlohmann::json::array();
    for (const TimedPipelineAction& t : rank) {
      actions.push_back({{"kind", pipeline_action_kind_name(t.action.kind)},
                         {"micro_batch", t.action.micro_batch},
                         {"chunk", t.action.chunk},
                         {"peer", t.action.peer},
                         {"start_s", t.start},
                         {"end_s", t.end}});
    }
    ranks.push_back(actions);
  }
  const PipelineShape& shape = pipeline_->shape();
  const nlohmann::json file = {{"step", step_},
                               {"schedule", config_.pp_schedule},
                               {"pp", shape.pp},
                               {"virtual_stages", shape.v},
                               {"micro_batches", shape.m},
                               {"ranks", ranks}};
  AtomicFile out(std::filesystem::path(config_.out_dir) / "pipeline_timeline.json");
  const std::string text = file.dump() + '\n';
  out.write(text.data(), text.size());
  out.commit();
}

void Trainer::print_header() {
  const ModelConfig& m = config_.model;
  const ActivationLayout tp = model_->activation_layout();
  // Rank 0's share: under pipeline parallelism its stages' parameters, and one context
  // per micro-batch the schedule keeps in flight (here: per micro-batch).
  const int64_t activations = Transformer::predict_activation_bytes(m, config_.micro_batch_size, config_.seq_len,
                                                                    config_.loss_chunk_rows, tp,
                                                                    config_.activation_checkpointing,
                                                                    model_->local_units(), config_.precision.compute);
  std::vector<ParameterSpec> specs;
  for (const Parameter& p : model_->store().params()) {
    if (p.numel() > 0) specs.push_back(p.spec);
  }
  const ModelStateBytes states = predict_model_states(local_parameter_specs(specs, tp.tp),
                                                      mesh_ ? mesh_->size(Axis::dp_shard_cp) : 1, config_.zero_stage,
                                                      config_.precision.compute, mesh_ ? mesh_->size(Axis::ep) : 1);
  fmt::print(*log_, "ndtrain: {} model, {} layers, d_model {}, {} heads, vocab {}, output layer {}: {:.2f}M parameters\n",
             arch_name(m.arch), m.n_layer, m.d_model, m.n_head, m.vocab_size,
             m.tied_embeddings ? "tied to the embedding" : "untied", static_cast<double>(count_parameters(m)) / 1e6);
  fmt::print(*log_, "data: {} training tokens from {}{}\n", train_data_.size(), config_.train_data,
             val_data_ ? fmt::format(", {} validation tokens from {}", val_data_->size(), config_.val_data)
                       : std::string(", validation on training data"));
  const int accum = rows_per_rank_ / config_.micro_batch_size;
  fmt::print(*log_, "batch: {} x {} tokens per step; {} data-parallel rank{} x {} micro-step{} of {}; {} steps\n",
             config_.batch_size, config_.seq_len, dp_size_, dp_size_ == 1 ? "" : "s", accum,
             accum == 1 ? "" : "s", config_.micro_batch_size, config_.steps);
  fmt::print(*log_, "mesh: {}; {} thread{} per rank{}\n", mesh_ ? mesh_->shape().str() : std::string("one rank"),
             config_.threads, config_.threads == 1 ? "" : "s",
             dp_size_ > 1 ? "; " + describe_sync() : "");
  fmt::print(*log_, "matmuls: {}\n", kernels::gemm_library());
  const Precision& precision = config_.precision;
  if (precision.low()) {
    fmt::print(*log_, "precision: matmuls and saved activations in {} ({}); master weights, gradients, optimizer, norms, "
               "softmax and loss in fp32; gradients reduced in {}\n",
               compute_dtype_config_name(precision.compute), kernels::lowp_gemm_backend(precision.compute),
               compute_dtype_config_name(config_.reduce_dtype));
    if (precision.fp8) {
      fmt::print(*log_, "fp8: the blocks' {} linear layers (inputs and weights e4m3, output gradients e5m2; power-of-two "
                 "delayed scaling over {} steps, margin {}); the output layer in bf16\n",
                 model_->fp8()->count(), precision.fp8_scaling.amax_history_len, precision.fp8_scaling.margin);
    }
  } else if (config_.reduce_dtype != DType::f32) {
    fmt::print(*log_, "precision: fp32 compute; data-parallel gradients reduced in {}\n",
               compute_dtype_config_name(config_.reduce_dtype));
  }
  if (loss_scaler_) {
    fmt::print(*log_, "loss scaling: dynamic from {} (x{} after {} clean steps, x{} on overflow, within [{}, {}])\n",
               config_.loss_scale.initial_scale, config_.loss_scale.growth_factor, config_.loss_scale.growth_interval,
               config_.loss_scale.backoff_factor, config_.loss_scale.min_scale, config_.loss_scale.max_scale);
  } else if (precision.compute == DType::f16) {
    fmt::print(*log_, "warning: precision.compute = \"fp16\" with precision.loss_scaling = \"off\": gradients below "
               "fp16's smallest subnormal (6e-8) become zero in the matmuls, and an overflow stops the run\n");
  }
  if (pipeline_) {
    const PipelineStages& st = pipeline_->stages();
    fmt::print(*log_, "pipeline: {} stages, schedule {}, {} chunk{} per rank, {} micro-batches per step; chunks: {}\n",
               mesh_->size(Axis::pp), config_.pp_schedule, config_.pp_virtual_stages,
               config_.pp_virtual_stages == 1 ? "" : "s", rows_per_rank_ / config_.micro_batch_size, st.describe());
  }
  if (tp.cp.active()) {
    const int chunk = config_.seq_len / tp.cp.chunk_count();
    fmt::print(*log_, "context parallel: {} ranks, {} attention, {} chunks of {} tokens ({}); each rank holds {} of the {} "
               "tokens of every sequence; gradients reduced over dp x cp; backward recomputes the attention "
               "scores (HFU counts it)\n",
               tp.cp.size, cp_mode_name(tp.cp.mode), tp.cp.chunk_count(), chunk,
               tp.cp.chunks == CpChunks::zigzag ? "rank r: chunks r and 2cp-1-r" : "rank r: chunk r",
               config_.seq_len / tp.cp.size, config_.seq_len);
  }
  if (m.is_moe()) {
    const int ep = mesh_ ? mesh_->size(Axis::ep) : 1;
    int blocks = 0;
    for (int l = 0; l < m.n_layer; ++l) blocks += m.is_moe_block(l);
    fmt::print(*log_, "mixture of experts: {} of {} blocks, {} experts of width {}, top-{} ({} scores{}){}, {}; aux loss "
               "{}, router z-loss {}; {:.2f}M parameters active per token; {}\n",
               blocks, m.n_layer, m.n_experts, m.expert_d_ff(), m.moe_top_k, moe_score_name(m.moe_score),
               m.moe_normalize_top_k ? ", normalised" : "",
               m.moe_shared_d_ff > 0 ? fmt::format(", shared MLP of width {}", m.moe_shared_d_ff) : "",
               m.moe_capacity_factor > 0 ? fmt::format("capacity factor {}", m.moe_capacity_factor) : "dropless",
               m.moe_aux_loss, m.moe_z_loss, static_cast<double>(model_->active_matmul_params()) / 1e6,
               ep > 1 ? fmt::format("expert parallel over {} ranks ({} experts each), expert weights reduced over {} "
                                    "rank{}",
                                    ep, m.n_experts / ep, mesh_->size(Axis::edp), mesh_->size(Axis::edp) == 1 ? "" : "s")
                      : "every expert on every rank");
  }
  if (tp.tp > 1) {
    fmt::print(*log_, "tensor parallel: {} ranks, each {} of {} heads and {} of {} MLP units; sequence parallel {}\n",
               tp.tp, m.n_head / tp.tp, m.n_head, m.d_ff / tp.tp, m.d_ff, tp.sequence_parallel ? "on" : "off");
  }
  fmt::print(*log_, "memory predicted per rank: params {:.1f} MiB, grads {:.1f} MiB, optimizer {:.1f} MiB (after a step), "
             "activations {:.1f} MiB{}\n",
             mib(states.params), mib(states.grads), mib(states.optimizer), mib(activations),
             pipeline_ ? " per micro-batch in flight" : "");
  if (config_.activation_checkpointing.mode != CheckpointMode::none) {
    const ActivationCheckpointing& ac = config_.activation_checkpointing;
    fmt::print(*log_, "activation checkpointing: {}{}; the recompute adds {:.1f}% to the model's FLOPs (HFU counts it)\n",
               checkpoint_mode_name(ac.mode), ac.every > 1 ? fmt::format(" of every {}th block", ac.every) : "",
               100.0 * model_->recompute_flops_per_token(config_.seq_len) / model_->flops_per_token(config_.seq_len));
  }
  fmt::print(*log_, "MFU peak: {:.1f} GFLOP/s ({})\n", peak_.flops_per_s / 1e9, peak_.source);
  const bool metrics_on = !config_.out_dir.empty();
  fmt::print(*log_, "metrics: {}\n", metrics_on ? config_.out_dir + "/metrics.jsonl" : std::string("(off)"));
  log_->flush();
}

StepStats Trainer::step() {
  const auto t0 = std::chrono::steady_clock::now();
  set_comm_step(step_);
  const int micro = config_.micro_batch_size, T = config_.seq_len;
  const int accum = rows_per_rank_ / micro;
  // Every rank scales by the global token count: the sum over ranks is the global mean;
  // and, with dynamic loss scaling, by the loss scale.
  const float loss_scale = loss_scaler_ ? loss_scaler_->scale() : 1.0f;
  const float grad_scale = loss_scale / static_cast<float>(static_cast<int64_t>(config_.batch_size) * T);
  const double exposed_before = sync_->exposed_wait_seconds();
  model_->store().refresh_compute();  // the last step (or a load) changed the values
  if (Fp8Linears* fp8 = model_->fp8()) fp8->begin_step();
  sync_->zero_grads();
  double loss = 0, z_loss = 0;  // mean token losses: cross-entropy, and optim.z_loss's term
  if (pipeline_) {
    // The sum of this rank's token losses over its micro-batches, per token it holds.
    loss = pipeline_step(grad_scale) / (static_cast<double>(micro) * local_tokens(T));
  } else {
    for (int m = 0; m < accum; ++m) {
      fetch_train_batch(dp_rank_ * rows_per_rank_ + m * micro, micro);
      sync_->begin_backward(/*sync=*/m == accum - 1);
      model_->prepare(ctx_, inputs_.data(), targets_.data(), micro, T, grad_scale, /*forward_only=*/false);
      loss += run_forward_backward(*model_, ctx_, sync_.get());
      z_loss += ctx_.z_loss_sum / static_cast<double>(ctx_.rows());
      sync_->finish_backward();
    }
  }
  StepStats s;
  collect_moe_totals(s);
  // The mean losses over the ranks; the z term (optim.z_loss, not reported under
  // pipeline parallelism: its gradient is right, the runner sums only the loss) in the
  // same all-reduce.
  const bool reports_z = config_.z_loss > 0 && !pipeline_;
  double means[2] = {loss / accum, z_loss / accum};
  mean_over_dp(means, reports_z ? 2 : 1);
  loss = means[0];
  update_fp8_scales();
  if (config_.nonfinite_gradient_step == step_ + 1) inject_nonfinite_gradient();
  // The gradients hold loss_scale x the true ones: the norm, the clip and the update
  // divide it out.
  const double norm = sync_->grad_norm() / loss_scale;
  // After a rollback, stability.rollback_lr_factor for stability.rollback_lr_steps steps.
  const float lr = config_.schedule.at(step_) * (step_ < lr_factor_until_ ? config_.rollback_lr_factor : 1.0f);
  s.loss_scale = loss_scale;
  s.finite = on_every_rank(std::isfinite(loss) && std::isfinite(norm));
  if (!s.finite && loss_scaler_ && loss_scale > config_.loss_scale.min_scale) {
    s.overflow_skipped = !loss_scaler_->update(true);
  } else if (s.finite && loss_scaler_) {
    loss_scaler_->update(false);
  }
  // Stability (docs/stability.md): a non-finite step the loss scaler did not handle, or
  // a spike against the recent steps. The loss and the norm are global, so every rank
  // reaches the same verdict.
  std::string action, reason;
  if (!s.finite && !s.overflow_skipped) {
    action = config_.on_nonfinite;
    reason = fmt::format("the loss is {} and the gradient norm {}", loss, norm);
  } else if (s.finite) {
    reason = spikes_.check(loss, norm);
    if (!reason.empty()) action = config_.on_spike, ++summary_counts_.spikes;
  }
  const bool apply = s.finite && (reason.empty() || action == "warn");
  if (apply) {
    float clip = clip_factor(norm, config_.grad_clip);
    if (zclip_) {
      const ZClip::Decision d = zclip_->update(norm);
      clip = d.clipped ? static_cast<float>(std::min(1.0, d.target / norm)) : 1.0f;
      if (d.clipped) {
        ++summary_counts_.zclips;
        s.intervention = fmt::format("ZClip: gradient norm {:.4g} (z-score {:.1f}) clipped to {:.4g}", norm, d.z,
                                     d.target);
      }
    }
    sync_->step(lr, clip / loss_scale);
    spikes_.record(loss, norm);
  }
  s.step = step_;
  if (apply || s.overflow_skipped || action == "skip") ++step_;
  if (action == "warn") {
    s.intervention = "spike (update applied): " + reason + (s.intervention.empty() ? "" : "; " + s.intervention);
  } else if (action == "skip") {
    ++summary_counts_.skipped_steps;
    s.intervention = "update skipped on every rank: " + reason;
  } else if (action == "rollback") {
    rollback(s, reason);
  }
  s.loss = loss;
  if (reports_z) s.z_loss = means[1];
  s.lr = lr;
  s.grad_norm = norm;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.tokens_per_s = static_cast<double>(config_.batch_size) * T / s.seconds;
  s.mfu = model_->flops_per_token(T) * s.tokens_per_s / (peak_.flops_per_s * world_size());
  s.hfu = s.mfu * (1.0 + model_->recompute_flops_per_token(T) / model_->flops_per_token(T));
  s.peak_bytes = MemoryLedger::instance().peak_total();
  s.comm_wait_seconds = sync_->exposed_wait_seconds() - exposed_before;
  // JSON has no NaN or infinity: a non-finite value is written as its text ("nan", "inf").
  const auto number = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(fmt::format("{}", v)); };
  nlohmann::json record = {{"step", s.step + 1}, {"loss", number(s.loss)}, {"lr", s.lr},
                           {"grad_norm", number(s.grad_norm)}, {"step_s", s.seconds},
                           {"tokens_per_s", s.tokens_per_s}, {"mfu", s.mfu}, {"hfu", s.hfu},
                           {"peak_mem_bytes", s.peak_bytes}, {"mem", memory_record()}};
  if (loss_scaler_) record["loss_scale"] = s.loss_scale;
  if (reports_z) record["z_loss"] = number(s.z_loss);
  if (config_.model.is_moe()) {
    record["moe"] = {{"aux_loss", number(s.moe_aux_loss)},
                     {"z_loss", number(s.moe_z_loss)},
                     {"drop_rate", s.moe_drop_rate},
                     {"tokens_per_expert", s.moe_tokens_per_expert}};
  }
  if (s.overflow_skipped) {
    record["update_skipped"] = fmt::format("overflow at loss scale {}: scale now {}", s.loss_scale, loss_scaler_->scale());
  } else if (!s.finite) {
    record["update_skipped"] = "non-finite loss or gradient norm";
  }
  if (!s.intervention.empty()) record["intervention"] = s.intervention;
  if (pipeline_) {
    // This rank's measured bubble: its time outside compute actions, over its schedule's time.
    const PipelineStepTimes& t = pipeline_->last_step_times();
    record["pp_bubble"] = t.wall > 0 ? 1.0 - t.busy / t.wall : 0.0;
  }
  if (world_size() > 1) record["comm"] = comm_record(), record["dp_exposed_wait_s"] = s.comm_wait_seconds;
  metrics_->write(record);
  return s;
}

void Trainer::collect_moe_totals(StepStats& s) {
  if (!config_.model.is_moe()) return;
  const MoeTotals totals = model_->take_moe_totals();
  const int E = config_.model.n_experts;
  // [aux, z, dropped, assignments, tokens of expert 0 .. E-1]: each rank's own tokens
  // (dp, cp, and under ep too: counted where they are routed from) and its stages' blocks;
  // tp ranks route the same tokens alike, so tp rank 0 counts them.
  std::vector<float> v(static_cast<size_t>(4 + E), 0.0f);
  if (!mesh_ || mesh_->coord(Axis::tp) == 0) {
    v[0] = static_cast<float>(totals.aux_sum), v[1] = static_cast<float>(totals.z_sum);
    v[2] = static_cast<float>(totals.stats.dropped), v[3] = static_cast<float>(totals.stats.assignments);
    for (size_t e = 0; e < totals.stats.tokens_per_expert.size(); ++e) {
      v[4 + e] = static_cast<float>(totals.stats.tokens_per_expert[e]);
    }
  }
  if (mesh_) mesh_->world().all_reduce(v.data(), v.size(), DType::f32, ReduceOp::sum);
  const double tokens = static_cast<double>(config_.batch_size) * config_.seq_len;
  s.moe_aux_loss = v[0] / tokens;
  s.moe_z_loss = v[1] / tokens;
  s.moe_drop_rate = v[3] > 0 ? v[2] / v[3] : 0.0;
  s.moe_tokens_per_expert.assign(v.begin() + 4, v.end());
}

double Trainer::pipeline_step(float grad_scale) {
  const int micro = config_.micro_batch_size, T = config_.seq_len;
  auto prepare = [&](int mb, MicroBatchContext& ctx, bool forward_only) {
    fetch_train_batch(dp_rank_ * rows_per_rank_ + mb * micro, micro);
    model_->prepare(ctx, inputs_.data(), targets_.data(), micro, T, grad_scale, forward_only);
  };
  // Gradients accumulate over the whole schedule (ZeRO-2/3 reduce-scatter each group's
  // after its backward, micro-batch by micro-batch); the data-parallel sync follows it.
  // A tied embedding's two copies are then summed in whatever form the sync left them
  // (whole, or this rank's shard: the two stages shard it alike), as sums commute.
  sync_->begin_backward(/*sync=*/false);
  double loss_sum = pipeline_->train(prepare);
  sync_->begin_backward(/*sync=*/true);
  sync_->finish_backward();
  sum_tied_embedding_gradient();
  return sum_over_pp(loss_sum);
}

void Trainer::update_fp8_scales() {
  Fp8Linears* fp8 = model_->fp8();
  if (!fp8) return;
  // Every rank saw part of each tensor (its rows of the batch, its tp block of a weight,
  // its pipeline stage's layers): the max over all ranks is the whole tensor's amax.
  std::vector<float>& amax = fp8->step_amax();
  if (mesh_) mesh_->world().all_reduce(amax.data(), amax.size(), DType::f32, ReduceOp::max);
  fp8->finish_step();
}

bool Trainer::on_every_rank(bool local) {
  if (!mesh_) return local;
  float failed = local ? 0.0f : 1.0f;
  mesh_->world().all_reduce(&failed, 1, DType::f32, ReduceOp::max);
  return failed == 0.0f;
}

void Trainer::inject_nonfinite_gradient() {
  if ((mesh_ ? mesh_->world().rank() : 0) != config_.nonfinite_gradient_rank) return;
  for (size_t p = 0; p < model_->store().params().size(); ++p) {
    const auto [grad, numel] = sync_->reduced_gradient(p);
    if (numel == 0) continue;
    grad[0] = std::numeric_limits<float>::infinity();
    if (log_) fmt::print(*log_, "debug: gradient of {} set to +inf on rank {} at step {}\n",
                         model_->store().params()[p].name(), config_.nonfinite_gradient_rank, step_ + 1);
    return;
  }
}

double Trainer::sum_over_pp(double value) {
  // Only the rank holding the head has the loss: share it (as f32, like mean_over_dp).
  float v = static_cast<float>(value);
  mesh_->axis(Axis::pp).all_reduce(&v, 1, DType::f32, ReduceOp::sum);
  return v;
}

void Trainer::sum_tied_embedding_gradient() {
  if (!tied_pair_ || tied_pair_->size() != 2) return;
  const int pp = mesh_->size(Axis::pp), rank = mesh_->coord(Axis::pp);
  if (rank != 0 && rank != pp - 1) return;
  const std::vector<Parameter>& params = model_->store().params();
  for (size_t p = 0; p < params.size(); ++p) {
    if (params[p].name() != "wte.weight") continue;
    const auto [grad, numel] = sync_->reduced_gradient(p);
    tied_pair_->all_reduce(grad, static_cast<size_t>(numel), DType::f32, ReduceOp::sum);
  }
}

double Trainer::evaluate() {
  // The validation set is train.eval_batches global batches of train.batch_size rows,
  // split over the data-parallel ranks and into micro-batches like a training batch: the
  // same rows, so the same loss, on any mesh.
  const int micro = config_.micro_batch_size, T = config_.seq_len, accum = rows_per_rank_ / micro;
  model_->store().refresh_compute();
  double total = 0;
  if (pipeline_) {
    for (int b = 0; b < config_.eval_batches; ++b) {
      auto prepare = [&](int mb, MicroBatchContext& ctx, bool) {
        val_loader_->eval_batch(b, dp_rank_ * rows_per_rank_ + mb * micro, micro, inputs_.data(), targets_.data());
        model_->prepare(ctx, inputs_.data(), targets_.data(), micro, T, 0.0f, /*forward_only=*/true);
      };
      total += sum_over_pp(pipeline_->evaluate(accum, prepare)) / (static_cast<double>(micro) * local_tokens(T));
    }
    return mean_over_dp(total / (config_.eval_batches * accum));
  }
  for (int b = 0; b < config_.eval_batches; ++b) {
    for (int m = 0; m < accum; ++m) {
      val_loader_->eval_batch(b, dp_rank_ * rows_per_rank_ + m * micro, micro, inputs_.data(), targets_.data());
      model_->prepare(ctx_, inputs_.data(), targets_.data(), micro, T, 0.0f, /*forward_only=*/true);
      total += run_forward(*model_, ctx_, sync_.get());
    }
  }
  return mean_over_dp(total / (config_.eval_batches * accum));
}

void Trainer::print_step(const StepStats& s) {
  fmt::print(*log_,
             "step {:>5}/{} | loss {:.4f}{} | lr {:.2e} | grad norm {:.3f} | {:>8.0f} tok/s | MFU {:5.1f}%{} | "
             "peak mem {:.1f} MiB | {:.0f} ms{}{}\n",
             s.step + 1, config_.steps, s.loss, s.z_loss > 0 ? fmt::format(" (z-loss {:.2e})", s.z_loss) : "", s.lr, s.grad_norm, s.tokens_per_s, 100.0 * s.mfu,
             recomputes() ? fmt::format(" HFU {:5.1f}%", 100.0 * s.hfu) : "", mib(s.peak_bytes), 1e3 * s.seconds,
             dp_size_ > 1 ? fmt::format(" (comm wait {:.0f} ms)", 1e3 * s.comm_wait_seconds) : "",
             config_.model.is_moe() ? fmt::format(" | moe aux {:.3e} drop {:.1f}%", s.moe_aux_loss, 100.0 * s.moe_drop_rate)
                                    : "");
  log_->flush();
}

void Trainer::stop_on_non_finite(const StepStats& s) {
  if (log_) print_step(s);
  std::string saved = "checkpoints are off, so nothing was saved";
  if (checkpoints_->enabled()) {
    checkpoints_->finish();
    try {
      // The update was not applied: the state is the one after the last finite step.
      if (checkpoints_->last_saved_step() != step_) save_checkpoint(/*async=*/false);
      saved = fmt::format("the state after step {} (the last finite one) is saved in {}", step_,
                          (checkpoints_->root() / ckpt::checkpoint_dir_name(step_)).string());
    } catch (const Error& e) {
      saved = e.what();
    }
  }
  saved[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(saved[0])));
  fail("step {}: the loss is {} and the gradient norm {}, so training cannot go on; the update was not applied and "
       "the run stops. {}. A smaller optim.lr (now {}), a longer optim.warmup_steps (now {}) or optim.grad_clip "
       "(now {}) may help; resume with --resume",
       s.step + 1, s.loss, s.grad_norm, saved, config_.schedule.max_lr, config_.schedule.warmup_steps,
       config_.grad_clip);
}

RunSummary Trainer::run() {
  RunSummary summary;
  summary.unigram_entropy = unigram_entropy(train_data_.tokens(), train_data_.size());
  std::vector<double> rates, mfus, hfus;
  install_stop_handler();
  metrics_->write(run_record());
  while (step_ < config_.steps) {
    const StepStats s = step();
    if (!s.finite && !s.overflow_skipped && config_.on_nonfinite == "stop") stop_on_non_finite(s);
    if (!s.intervention.empty()) {
      if (log_) fmt::print(*log_, "step {:>5}/{} | {}\n", s.step + 1, config_.steps, s.intervention);
      metrics_->write({{"step", s.step + 1}, {"event", s.intervention}});
    }
    if (s.overflow_skipped && log_) {
      fmt::print(*log_, "step {:>5}/{} | overflow (loss {}, gradient norm {}) at loss scale {}: update skipped, scale "
                 "now {}\n",
                 s.step + 1, config_.steps, s.loss, s.grad_norm, s.loss_scale, loss_scaler_->scale());
    }
    summary.losses.push_back(s.loss);
    // The first step pays for first-touch page faults; leave it out of the medians.
    if (s.step > 0 || config_.steps == 1) rates.push_back(s.tokens_per_s), mfus.push_back(s.mfu), hfus.push_back(s.hfu);
    // (A rollback to a checkpoint's step does not save that step again.)
    if (config_.checkpoint_every > 0 && step_ % config_.checkpoint_every == 0 && step_ < config_.steps &&
        checkpoints_->last_saved_step() != step_) {
      save_checkpoint(config_.checkpoint_async);
    }
    if (checkpoints_->poll()) {  // SIGTERM on some rank: save (below) and stop
      if (log_) {
        fmt::print(*log_, "stop requested (SIGTERM) after step {}: {}\n", step_,
                   checkpoints_->enabled() ? "saving and stopping" : "stopping (checkpoints are off: nothing is saved)");
      }
      if (log_ && s.step % config_.log_every != 0) print_step(s);
      if (rates.empty()) rates.push_back(s.tokens_per_s), mfus.push_back(s.mfu), hfus.push_back(s.hfu);
      summary.stopped_by_signal = true;
      break;
    }
    const bool last = step_ == config_.steps;
    if (log_ && (s.step % config_.log_every == 0 || last)) print_step(s);
    if (config_.eval_every > 0 && step_ % config_.eval_every == 0 && !last) {
      const double val = evaluate();
      summary.val_losses.emplace_back(step_, val);
      metrics_->write({{"step", step_}, {"val_loss", val}});
      if (log_) fmt::print(*log_, "step {:>5}/{} | validation loss {:.4f}\n", step_, config_.steps, val);
    }
  }
  // The final checkpoint comes before the final evaluation and the sample: an error in
  // either cannot lose it.
  if (config_.save_on_exit && checkpoints_->enabled() && checkpoints_->last_saved_step() != step_) {
    save_checkpoint(/*async=*/false);
  }
  checkpoints_->finish();
  if (config_.steps == 0 && log_) {
    fmt::print(*log_, "train.steps = 0: the initial state is saved in {}\n",
               (checkpoints_->root() / ckpt::checkpoint_dir_name(0)).string());
  }
  // A stopped run (SIGTERM: a scheduler's grace period is short) skips the final
  // evaluation and the sample.
  if (!summary.stopped_by_signal) {
    const double val = evaluate();
    summary.val_losses.emplace_back(step_, val);
    metrics_->write({{"step", step_}, {"val_loss", val}});
    if (log_) fmt::print(*log_, "step {:>5}/{} | validation loss {:.4f}\n", step_, config_.steps, val);
  }
  summary.median_tokens_per_s = median(rates);
  summary.median_mfu = median(mfus);
  summary.median_hfu = median(hfus);
  if (loss_scaler_) summary.overflow_skipped_steps = loss_scaler_->skipped_steps();
  summary.spikes = summary_counts_.spikes;
  summary.skipped_steps = summary_counts_.skipped_steps;
  summary.rollbacks = summary_counts_.rollbacks;
  summary.zclips = summary_counts_.zclips;
  // Every rank samples (the same tokens): under FSDP the forward pass is collective.
  // Sampling runs on a context of the model's own: the training context goes first, so
  // the activation peak stays the training one.
  ctx_ = MicroBatchContext();
  if (config_.sample_tokens > 0 && pipeline_ && log_) {
    fmt::print(*log_, "note: no sample: sampling runs the whole model on each rank, which pipeline parallelism "
               "splits (sample from the final checkpoint with `ndtrain generate`)\n");
  }
  if (config_.sample_tokens > 0 && !summary.stopped_by_signal && !pipeline_) {
    SampleOptions options{config_.sample_tokens, config_.temperature, config_.top_k, config_.seed};
    model_->store().refresh_compute();
    summary.sample =
        tokens_to_bytes(generate(*model_, bytes_to_tokens(config_.sample_prompt), options));
  }
  MemoryLedger& ledger = MemoryLedger::instance();
  nlohmann::json mem;
  for (size_t t = 0; t < kNumMemTags; ++t) {
    mem[std::string(mem_tag_name(static_cast<MemTag>(t)))] = ledger.peak(static_cast<MemTag>(t));
  }
  const bool trained = !summary.losses.empty();  // train.steps = 0 trains nothing
  const bool validated = !summary.val_losses.empty();
  metrics_->write({{"summary",
                   {{"first_loss", trained ? nlohmann::json(summary.losses.front()) : nlohmann::json()},
                    {"last_loss", trained ? nlohmann::json(summary.losses.back()) : nlohmann::json()},
                    {"val_loss", validated ? nlohmann::json(summary.val_losses.back().second) : nlohmann::json()},
                    {"stopped_by_signal", summary.stopped_by_signal},
                    {"overflow_skipped_steps", summary.overflow_skipped_steps},
                    {"spikes", summary.spikes},
                    {"skipped_steps", summary.skipped_steps},
                    {"rollbacks", summary.rollbacks},
                    {"zclip_clipped_steps", summary.zclips},
                    {"unigram_entropy", summary.unigram_entropy},
                    {"median_tokens_per_s", summary.median_tokens_per_s},
                    {"median_mfu", summary.median_mfu},
                    {"median_hfu", summary.median_hfu},
                    {"peak_mem_bytes", ledger.peak_total()},
                    {"peak_mem_by_tag", mem},
                    {"peak_rss_bytes", process_peak_rss_bytes()},
                    {"comm", comm_record()}}}});
  if (log_) {
    fmt::print(*log_, "\n== summary ==\n");
    const std::string validation =
        validated ? fmt::format("validation {:.4f}", summary.val_losses.back().second) : "no validation (stopped)";
    if (!trained) {
      fmt::print(*log_, "loss: no training steps; {} (unigram entropy of the data {:.4f})\n", validation,
                 summary.unigram_entropy);
    } else {
      fmt::print(*log_, "loss: first {:.4f}, last {:.4f}; {} (unigram entropy of the data {:.4f})\n",
                 summary.losses.front(), summary.losses.back(), validation, summary.unigram_entropy);
    }
    fmt::print(*log_, "throughput: median {:.0f} tokens/s, MFU {:.1f}%, HFU {:.1f}% (with the recomputed forward)\n",
               summary.median_tokens_per_s, 100.0 * summary.median_mfu, 100.0 * summary.median_hfu);
    if (world_size() > 1) {
      for (Axis axis : reported_axes()) {
        const CommStats& stats = mesh_->axis(axis).stats();
        if (stats.total_wire_bytes() == 0) continue;
        fmt::print(*log_, "communication on {} (rank 0): {:.1f} MiB sent, {:.2f} s waiting\n", axis_name(axis),
                   mib(static_cast<size_t>(stats.total_wire_bytes())), stats.total_wait_seconds());
      }
      fmt::print(*log_, "gradient communication backward did not hide: {:.2f} s\n", sync_->exposed_wait_seconds());
    }
    std::string by_tag;
    for (size_t t = 0; t < kNumMemTags; ++t) {
      const MemTag tag = static_cast<MemTag>(t);
      if (ledger.peak(tag) > 0) by_tag += fmt::format(" {} {:.1f},", mem_tag_name(tag), mib(ledger.peak(tag)));
    }
    if (!by_tag.empty()) by_tag.pop_back();
    fmt::print(*log_, "peak memory: ledger {:.1f} MiB ({} MiB), process RSS {:.1f} MiB\n",
               mib(ledger.peak_total()), by_tag.substr(1), mib(process_peak_rss_bytes()));
    if (summary.spikes + summary.skipped_steps + summary.rollbacks + summary.zclips > 0) {
      fmt::print(*log_, "stability: {} spike{} detected, {} update{} skipped, {} rollback{}, {} ZClip clip{}{}\n",
                 summary.spikes, summary.spikes == 1 ? "" : "s", summary.skipped_steps,
                 summary.skipped_steps == 1 ? "" : "s", summary.rollbacks, summary.rollbacks == 1 ? "" : "s",
                 summary.zclips, summary.zclips == 1 ? "" : "s",
                 skipped_batches_.empty() ? std::string()
                                          : fmt::format("; {} training batches skipped", batch_offset_));
    }
    if (loss_scaler_) {
      fmt::print(*log_, "loss scaling: {} step{} skipped for overflow; final scale {}\n",
                 summary.overflow_skipped_steps, summary.overflow_skipped_steps == 1 ? "" : "s", loss_scaler_->scale());
    }
    if (!summary.sample.empty()) {
      fmt::print(*log_, "\n== sample (prompt \"{}\") ==\n{}{}\n", config_.sample_prompt, config_.sample_prompt,
                 summary.sample);
    }
    if (summary.stopped_by_signal) {
      fmt::print(*log_, "\nstopped by SIGTERM after step {} of {}: {}\n", step_, config_.steps,
                 checkpoints_->enabled()
                     ? fmt::format("the state is saved in {}; continue with --resume",
                                   (checkpoints_->root() / ckpt::checkpoint_dir_name(step_)).string())
                     : std::string("checkpoints are off, so the state is lost"));
    }
    log_->flush();
  }
  // After the summary, so its counters (and every step's) leave out the gather.
  if (pipeline_ && trained) write_pipeline_timeline();
  return summary;
}

}  // namespace ndt
