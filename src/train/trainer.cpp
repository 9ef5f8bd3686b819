#include "train/trainer.h"

#include "parallel/memory_model.h"
#include "parallel/parallelize.h"

#include "core/memory.h"
#include "core/timing.h"
#include "kernels/kernels.h"
#include "optim/clip.h"
#include "train/generate.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

namespace ndt {

namespace {

double mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

RunConfig with_schedule_length(RunConfig config) {
  if (config.schedule.decay_steps == 0) config.schedule.decay_steps = config.steps;
  return config;
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
      metrics_(config.out_dir.empty() || !leads(mesh) ? "" : config.out_dir + "/metrics.jsonl", !config.resume.empty()) {
  config_.validate();
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
  if (config_.micro_batch_size == 0) config_.micro_batch_size = rows_per_rank_;
  if (config_.threads == 0) config_.threads = automatic_threads(mesh_ ? mesh_->world().size() : 1);
  kernels::set_num_threads(config_.threads);
  // Built without parameter memory: parallelize() places the parameters first.
  model_ = std::make_unique<Transformer>(config_.model, config_.seed, config_.loss_chunk_rows,
                                         /*materialize_parameters=*/false);
  sync_ = parallelize(*model_, mesh_,
                      {config_.zero_stage, static_cast<size_t>(config_.bucket_mb * 1024 * 1024),
                       config_.reshard_after_forward, config_.prefetch, config_.sequence_parallel, config_.adamw});
  checkpoints_ = std::make_unique<TrainingCheckpoints>(config_, mesh_, log_);
  if (!config_.val_data.empty()) {
    val_data_ = std::make_unique<TokenDataset>(std::vector<std::string>{config_.val_data});
  }
  val_loader_ = std::make_unique<BatchLoader>(val_data_ ? *val_data_ : train_data_, config_.batch_size,
                                              config_.seq_len, config_.seed);
  for (int64_t i = 0; i < train_data_.size(); ++i) {
    NDT_CHECK(train_data_.tokens()[i] < config_.model.vocab_size,
              "data.train = \"{}\": token {} at position {} is outside model.vocab_size = {}",
              config_.train_data, train_data_.tokens()[i], i, config_.model.vocab_size);
  }
  peak_ = resolve_peak_flops(config_.peak_gflops, config_.threads);
  const size_t rows = static_cast<size_t>(config_.micro_batch_size) * config_.seq_len;
  inputs_.resize(rows);
  targets_.resize(rows);
  if (log_) print_header();
  if (!config_.resume.empty()) {
    const std::filesystem::path dir = resolve_resume(config_.resume, checkpoints_->root());
    const nlohmann::json state = load_training_checkpoint(dir, *sync_, config_, mesh_);
    step_ = state.at("step").get<int64_t>();
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
  }
  checkpoints_->claim(config_.resume.empty() ? -1 : step_);
}

void Trainer::save_checkpoint(bool async) {
  checkpoints_->save(step_, *sync_, training_state(config_, step_, *sync_, mesh_), async);
}

std::string Trainer::describe_sync() const {
  const size_t n = sync_->bucket_count();
  if (config_.zero_stage >= 2) {
    return fmt::format("ZeRO stage {}, {} units (the root and each block)", config_.zero_stage, n);
  }
  return fmt::format("{}{} gradient bucket{} of >= {} MiB",
                     config_.zero_stage == 1 ? "ZeRO stage 1, " : "", n, n == 1 ? "" : "s", config_.bucket_mb);
}

double Trainer::mean_over_dp(double local) {
  if (dp_size_ == 1) return local;
  float value = static_cast<float>(local);
  mesh_->axis(Axis::dp).all_reduce(&value, 1, DType::f32, ReduceOp::avg);
  return value;
}

nlohmann::json Trainer::comm_record() const {
  nlohmann::json record = nlohmann::json::object();
  if (!mesh_) return record;
  for (Axis axis : {Axis::dp, Axis::dp_shard, Axis::dp_replicate, Axis::tp}) {
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

void Trainer::print_header() {
  const ModelConfig& m = config_.model;
  const TpLayout tp = model_->tensor_parallel().layout();
  const int64_t activations = Transformer::predict_activation_bytes(m, config_.micro_batch_size, config_.seq_len,
                                                                    config_.loss_chunk_rows, tp);
  const ModelStateBytes states = predict_model_states(local_parameter_specs(model_parameter_specs(m), tp.size),
                                                      mesh_ ? mesh_->size(Axis::dp_shard) : 1, config_.zero_stage);
  fmt::print(*log_, "ndtrain: {} model, {} layers, d_model {}, {} heads, vocab {}: {:.2f}M parameters\n",
             arch_name(m.arch), m.n_layer, m.d_model, m.n_head, m.vocab_size,
             static_cast<double>(count_parameters(m)) / 1e6);
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
  if (tp.size > 1) {
    fmt::print(*log_, "tensor parallel: {} ranks, each {} of {} heads and {} of {} MLP units; sequence parallel {}\n",
               tp.size, m.n_head / tp.size, m.n_head, m.d_ff / tp.size, m.d_ff, tp.sequence_parallel ? "on" : "off");
  }
  fmt::print(*log_, "memory predicted per rank: params {:.1f} MiB, grads {:.1f} MiB, optimizer {:.1f} MiB (after a step), "
             "activations {:.1f} MiB\n",
             mib(states.params), mib(states.grads), mib(states.optimizer), mib(activations));
  fmt::print(*log_, "MFU peak: {:.1f} GFLOP/s ({})\n", peak_.flops_per_s / 1e9, peak_.source);
  fmt::print(*log_, "metrics: {}\n", metrics_.path().empty() ? "(off)" : metrics_.path());
  log_->flush();
}

StepStats Trainer::step() {
  const auto t0 = std::chrono::steady_clock::now();
  set_comm_step(step_);
  const int micro = config_.micro_batch_size, T = config_.seq_len;
  const int accum = rows_per_rank_ / micro;
  // Every rank scales by the global token count: the sum over ranks is the global mean.
  const float grad_scale = 1.0f / static_cast<float>(static_cast<int64_t>(config_.batch_size) * T);
  const double exposed_before = sync_->exposed_wait_seconds();
  sync_->zero_grads();
  double loss = 0;
  for (int m = 0; m < accum; ++m) {
    train_loader_.train_batch(step_, dp_rank_ * rows_per_rank_ + m * micro, micro, inputs_.data(),
                              targets_.data());
    sync_->begin_backward(/*sync=*/m == accum - 1);
    model_->prepare(ctx_, inputs_.data(), targets_.data(), micro, T, grad_scale, /*forward_only=*/false);
    loss += run_forward_backward(*model_, ctx_, sync_.get());
    sync_->finish_backward();
  }
  loss = mean_over_dp(loss / accum);
  const double norm = sync_->grad_norm();
  const float lr = config_.schedule.at(step_);
  sync_->step(lr, clip_factor(norm, config_.grad_clip));

  StepStats s;
  s.step = step_++;
  s.loss = loss;
  s.lr = lr;
  s.grad_norm = norm;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.tokens_per_s = static_cast<double>(config_.batch_size) * T / s.seconds;
  s.mfu = model_->flops_per_token(T) * s.tokens_per_s / (peak_.flops_per_s * world_size());
  s.peak_bytes = MemoryLedger::instance().peak_total();
  s.comm_wait_seconds = sync_->exposed_wait_seconds() - exposed_before;
  nlohmann::json record = {{"step", s.step + 1}, {"loss", s.loss}, {"lr", s.lr}, {"grad_norm", s.grad_norm},
                           {"step_s", s.seconds}, {"tokens_per_s", s.tokens_per_s}, {"mfu", s.mfu},
                           {"peak_mem_bytes", s.peak_bytes}};
  if (world_size() > 1) record["comm"] = comm_record(), record["dp_exposed_wait_s"] = s.comm_wait_seconds;
  metrics_.write(record);
  return s;
}

double Trainer::evaluate() {
  // The validation set is train.eval_batches global batches of train.batch_size rows,
  // split over the data-parallel ranks and into micro-batches like a training batch: the
  // same rows, so the same loss, on any mesh.
  const int micro = config_.micro_batch_size, T = config_.seq_len, accum = rows_per_rank_ / micro;
  double total = 0;
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
             "step {:>5}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:>8.0f} tok/s | MFU {:5.1f}% | "
             "peak mem {:.1f} MiB | {:.0f} ms{}\n",
             s.step + 1, config_.steps, s.loss, s.lr, s.grad_norm, s.tokens_per_s, 100.0 * s.mfu,
             mib(s.peak_bytes), 1e3 * s.seconds,
             dp_size_ > 1 ? fmt::format(" (comm wait {:.0f} ms)", 1e3 * s.comm_wait_seconds) : "");
  log_->flush();
}

RunSummary Trainer::run() {
  RunSummary summary;
  summary.unigram_entropy = unigram_entropy(train_data_.tokens(), train_data_.size());
  std::vector<double> rates, mfus;
  if (checkpoints_->enabled()) install_stop_handler();
  while (step_ < config_.steps) {
    const StepStats s = step();
    summary.losses.push_back(s.loss);
    // The first step pays for first-touch page faults; leave it out of the medians.
    if (s.step > 0 || config_.steps == 1) rates.push_back(s.tokens_per_s), mfus.push_back(s.mfu);
    if (config_.checkpoint_every > 0 && step_ % config_.checkpoint_every == 0 && step_ < config_.steps) {
      save_checkpoint(config_.checkpoint_async);
    }
    if (checkpoints_->poll()) {  // SIGTERM on some rank: save (below) and stop
      if (log_) fmt::print(*log_, "stop requested (SIGTERM) after step {}: saving and stopping\n", step_);
      if (log_ && s.step % config_.log_every != 0) print_step(s);
      if (rates.empty()) rates.push_back(s.tokens_per_s), mfus.push_back(s.mfu);
      break;
    }
    const bool last = step_ == config_.steps;
    if (log_ && (s.step % config_.log_every == 0 || last)) print_step(s);
    if ((config_.eval_every > 0 && step_ % config_.eval_every == 0) || last) {
      const double val = evaluate();
      summary.val_losses.emplace_back(step_, val);
      metrics_.write({{"step", step_}, {"val_loss", val}});
      if (log_) fmt::print(*log_, "step {:>5}/{} | validation loss {:.4f}\n", step_, config_.steps, val);
    }
  }
  if (summary.val_losses.empty()) summary.val_losses.emplace_back(step_, evaluate());  // stopped early
  if (config_.save_on_exit && checkpoints_->enabled() && checkpoints_->last_saved_step() != step_) {
    save_checkpoint(/*async=*/false);
  }
  checkpoints_->finish();
  summary.median_tokens_per_s = median(rates);
  summary.median_mfu = median(mfus);
  // Every rank samples (the same tokens): under FSDP the forward pass is collective.
  // Sampling runs on a context of the model's own: the training context goes first, so
  // the activation peak stays the training one.
  ctx_ = MicroBatchContext();
  if (config_.sample_tokens > 0) {
    SampleOptions options{config_.sample_tokens, config_.temperature, config_.top_k, config_.seed};
    summary.sample =
        tokens_to_bytes(generate(*model_, bytes_to_tokens(config_.sample_prompt), options));
  }
  MemoryLedger& ledger = MemoryLedger::instance();
  nlohmann::json mem;
  for (size_t t = 0; t < kNumMemTags; ++t) {
    mem[std::string(mem_tag_name(static_cast<MemTag>(t)))] = ledger.peak(static_cast<MemTag>(t));
  }
  metrics_.write({{"summary",
                   {{"first_loss", summary.losses.front()},
                    {"last_loss", summary.losses.back()},
                    {"val_loss", summary.val_losses.back().second},
                    {"unigram_entropy", summary.unigram_entropy},
                    {"median_tokens_per_s", summary.median_tokens_per_s},
                    {"median_mfu", summary.median_mfu},
                    {"peak_mem_bytes", ledger.peak_total()},
                    {"peak_mem_by_tag", mem},
                    {"peak_rss_bytes", process_peak_rss_bytes()},
                    {"comm", comm_record()}}}});
  if (log_) {
    fmt::print(*log_, "\n== summary ==\n");
    fmt::print(*log_, "loss: first {:.4f}, last {:.4f}; validation {:.4f} (unigram entropy of the data {:.4f})\n",
               summary.losses.front(), summary.losses.back(), summary.val_losses.back().second,
               summary.unigram_entropy);
    fmt::print(*log_, "throughput: median {:.0f} tokens/s, MFU {:.1f}%\n", summary.median_tokens_per_s,
               100.0 * summary.median_mfu);
    if (world_size() > 1) {
      for (Axis axis : {Axis::dp, Axis::dp_shard, Axis::dp_replicate, Axis::tp}) {
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
    if (!summary.sample.empty()) {
      fmt::print(*log_, "\n== sample (prompt \"{}\") ==\n{}{}\n", config_.sample_prompt, config_.sample_prompt,
                 summary.sample);
    }
    log_->flush();
  }
  return summary;
}

}  // namespace ndt
