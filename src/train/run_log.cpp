#include "train/run_log.h"

#include "checkpoint/directory.h"
#include "core/memory.h"
#include "core/text_list.h"
#include "kernels/kernels.h"
#include "parallel/memory_model.h"
#include "parallel/offload_model.h"
#include "parallel/tensor/tensor_parallel.h"
#include "train/metrics_writer.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

namespace ndt {

namespace {

double mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }
const char* plural(int64_t n) { return n == 1 ? "" : "s"; }

// How gradients are combined, for the header.
std::string describe_sync(const RunConfig& config, const GradientSync& sync) {
  const size_t n = sync.bucket_count();
  if (config.zero_stage >= 2) return fmt::format("ZeRO stage {}, {} units (the root and each block)", config.zero_stage, n);
  const std::string reduction = sync.describe_reduction();
  return fmt::format("{}{} gradient bucket{} of >= {} MiB{}", config.zero_stage == 1 ? "ZeRO stage 1, " : "", n,
                     plural(static_cast<int64_t>(n)), config.bucket_mb, reduction.empty() ? "" : "; " + reduction);
}

// "nodes: 2 (host-a, host-b) x 2 ranks; dp crosses nodes (2 per group), tp inside a node":
// the axes of more than one rank, and whether their groups stay inside a node.
std::string describe_topology(DeviceMesh& mesh) {
  std::string axes;
  for (Axis axis : {Axis::pp, Axis::dp_replicate, Axis::dp_shard, Axis::dp, Axis::cp, Axis::cp_ulysses, Axis::cp_ring,
                    Axis::tp, Axis::ep}) {
    if (mesh.size(axis) == 1 || (axis == Axis::cp_ring && mesh.size(axis) == mesh.size(Axis::cp)) || (axis == Axis::dp && mesh.size(Axis::dp) == mesh.size(Axis::dp_shard)) ||
        (axis == Axis::dp && mesh.size(Axis::dp) == mesh.size(Axis::dp_replicate))) {
      continue;
    }
    const int n = mesh.nodes_spanned(axis);
    axes += fmt::format("; {} {}", axis_name(axis),
                        n == 1 ? std::string("inside a node") : fmt::format("crosses nodes ({} per group)", n));
  }
  return "nodes: " + mesh.topology().describe() + axes;
}

// Which chunks rank r holds, in words.
std::string cp_chunk_rule(const CpLayout& cp) {
  const bool zigzag = cp.chunks == CpChunks::zigzag;
  if (cp.mode != CpMode::usp) return zigzag ? "rank r: chunks r and 2cp-1-r" : "rank r: chunk r";
  return fmt::format("ring position p = r / {}: chunk{}, each rank of the position a contiguous 1/{} of them",
                     cp.ulysses, zigzag ? "s p and 2cr-1-p" : " p", cp.ulysses);
}

}  // namespace

bool RunLog::recomputes(const TrainingModel& model) const {
  // Activation checkpointing or context parallelism recomputes part of forward (HFU > MFU).
  return model.model().recompute_flops_per_token(config_.seq_len) > 0;
}

void RunLog::header(const TrainingModel& model, DeviceMesh& mesh, const TrainingData& data, const PeakFlops& peak) {
  hfu_ = recomputes(model);
  if (!out_) return;
  model_and_data(model, data);
  batch_and_mesh(model, mesh);
  precision(model);
  axes(model, mesh);
  predicted_memory(model, mesh);
  if (config_.activation_checkpointing.mode != CheckpointMode::none) {
    const ActivationCheckpointing& ac = config_.activation_checkpointing;
    const Transformer& m = model.model();
    fmt::print(*out_, "activation checkpointing: {}{}; the recompute adds {:.1f}% to the model's FLOPs (HFU counts it)\n",
               checkpoint_mode_name(ac.mode), ac.every > 1 ? fmt::format(" of every {}th block", ac.every) : "",
               100.0 * m.recompute_flops_per_token(config_.seq_len) / m.flops_per_token(config_.seq_len));
  }
  fmt::print(*out_, "MFU peak: {:.1f} GFLOP/s ({})\n", peak.flops_per_s / 1e9, peak.source);
  fmt::print(*out_, "metrics: {}\n", config_.out_dir.empty() ? std::string("(off)") : config_.out_dir + "/metrics.jsonl");
  out_->flush();
}

void RunLog::model_and_data(const TrainingModel& model, const TrainingData& data) {
  const ModelConfig& m = config_.model;
  fmt::print(*out_, "ndtrain: {} model, {} layers, d_model {}, {} heads, vocab {}, output layer {}: {:.2f}M parameters\n",
             arch_name(m.arch), m.n_layer, m.d_model, m.n_head, m.vocab_size,
             m.tied_embeddings ? "tied to the embedding" : "untied", static_cast<double>(count_parameters(m)) / 1e6);
  if (m.lora.enabled()) {
    const int64_t trainable = count_trainable_parameters(m), total = count_parameters(m);
    fmt::print(*out_, "LoRA: rank {}, alpha {} on {}: {} trainable parameters (the adapters, {:.3f}% of {}), the rest "
               "frozen\n",
               m.lora.rank, m.lora.alpha, string_list_text(m.lora.targets), trainable,
               100.0 * static_cast<double>(trainable) / static_cast<double>(total), total);
  } else if (!m.freeze.empty()) {
    const int64_t trainable = count_trainable_parameters(m), total = count_parameters(m);
    fmt::print(*out_, "train.freeze: {} trainable parameters ({:.2f}% of {}), the rest frozen: no gradients, "
               "optimizer state or gradient communication\n",
               trainable, 100.0 * static_cast<double>(trainable) / static_cast<double>(total), total);
  }
  fmt::print(*out_, "{}\n", data.data().describe());
  if (data.document_separator()) fmt::print(*out_, "{}\n", data.describe_documents());
}

void RunLog::batch_and_mesh(const TrainingModel& model, DeviceMesh& mesh) {
  const int dp = mesh.size(Axis::dp), accum = config_.micro_batches();
  fmt::print(*out_, "batch: {} x {} tokens per step; {} data-parallel rank{} x {} micro-step{} of {}; {} steps\n",
             config_.batch_size, config_.seq_len, dp, plural(dp), accum, plural(accum), config_.micro_batch_size,
             config_.steps);
  fmt::print(*out_, "mesh: {}; {} thread{} per rank{}\n",
             mesh.world().size() == 1 ? std::string("one rank") : mesh.shape().str(), config_.threads,
             plural(config_.threads), dp > 1 ? "; " + describe_sync(config_, model.sync()) : "");
  if (mesh.world().size() > 1) fmt::print(*out_, "{}\n", describe_topology(mesh));
  fmt::print(*out_, "matmuls: {}\n", kernels::gemm_library());
}

void RunLog::precision(const TrainingModel& model) {
  const Precision& precision = config_.precision;
  if (precision.low()) {
    fmt::print(*out_, "precision: matmuls and saved activations in {} ({}); master weights, gradients, optimizer, norms, "
               "softmax and loss in fp32; gradients reduced in {}\n",
               compute_dtype_config_name(precision.compute), kernels::lowp_gemm_backend(precision.compute),
               compute_dtype_config_name(config_.reduce_dtype));
    if (precision.fp8) {
      fmt::print(*out_, "fp8: the blocks' {} linear layers (inputs and weights e4m3, output gradients e5m2; power-of-two "
                 "delayed scaling over {} steps, margin {}); the output layer in bf16\n",
                 model.model().fp8()->count(), precision.fp8_scaling.amax_history_len,
                 precision.fp8_scaling.margin);
    }
  } else if (config_.reduce_dtype != DType::f32) {
    fmt::print(*out_, "precision: fp32 compute; data-parallel gradients reduced in {}\n",
               compute_dtype_config_name(config_.reduce_dtype));
  }
  const LossScalerConfig& ls = config_.loss_scale;
  if (config_.scales_loss()) {
    fmt::print(*out_, "loss scaling: dynamic from {} (x{} after {} clean steps, x{} on overflow, within [{}, {}])\n",
               ls.initial_scale, ls.growth_factor, ls.growth_interval, ls.backoff_factor, ls.min_scale, ls.max_scale);
  } else if (precision.compute == DType::f16) {
    fmt::print(*out_, "warning: precision.compute = \"fp16\" with precision.loss_scaling = \"off\": gradients below "
               "fp16's smallest subnormal (6e-8) become zero in the matmuls, and an overflow stops the run\n");
  }
}

void RunLog::axes(const TrainingModel& model, DeviceMesh& mesh) {
  const ModelConfig& m = config_.model;
  if (const PipelineRunner* pipeline = model.pipeline()) {
    const int v = config_.pp_virtual_stages;
    fmt::print(*out_, "pipeline: {} stages, schedule {}, {} chunk{} per rank, {} micro-batches per step; chunks: {}\n",
               mesh.size(Axis::pp), pipeline_schedule_name(config_.pp_schedule), v, plural(v), config_.micro_batches(),
               pipeline->stages().describe());
  }
  const ActivationLayout layout = model.model().activation_layout();
  if (layout.cp.active()) {
    const CpLayout& cp = layout.cp;
    const bool usp = cp.mode == CpMode::usp;
    const CpLayout cut = usp ? cp.ring() : cp;  // USP: the ring's chunks, each split over a Ulysses group
    fmt::print(*out_, "context parallel: {} ranks, {} attention, {} chunks of {} tokens ({}); each rank holds {} of the {} "
               "tokens of every sequence; gradients reduced over dp x cp; backward recomputes the attention "
               "scores (HFU counts it)\n",
               cp.size, cp_mode_name(cp.mode), cut.chunk_count(), config_.seq_len / cut.chunk_count(),
               cp_chunk_rule(cp), config_.seq_len / cp.size, config_.seq_len);
    if (usp) {
      fmt::print(*out_, "USP: Ulysses all-to-alls inside {} groups of {} consecutive cp ranks (cp_ulysses), ring attention "
                 "over {} positions (cp_ring) on 1/{} of the heads\n",
                 cut.size, cp.ulysses, cut.size, cp.ulysses);
    }
  }
  if (m.is_moe()) mixture_of_experts(model, mesh);
  if (layout.tp > 1) {
    fmt::print(*out_, "tensor parallel: {} ranks, each {} of {} heads and {} of {} MLP units; sequence parallel {}\n",
               layout.tp, m.n_head / layout.tp, m.n_head, m.d_ff / layout.tp, m.d_ff,
               layout.sequence_parallel ? "on" : "off");
  }
}

void RunLog::mixture_of_experts(const TrainingModel& model, DeviceMesh& mesh) {
  const ModelConfig& m = config_.model;
  const int ep = mesh.size(Axis::ep), edp = mesh.size(Axis::edp);
  int blocks = 0;
  for (int l = 0; l < m.n_layer; ++l) blocks += m.is_moe_block(l);
  fmt::print(*out_, "mixture of experts: {} of {} blocks, {} experts of width {}, top-{} ({} scores{}){}, {}; aux loss "
             "{}, router z-loss {}; {:.2f}M parameters active per token; {}\n",
             blocks, m.n_layer, m.n_experts, m.expert_d_ff(), m.moe_top_k, moe_score_name(m.moe_score),
             m.moe_normalize_top_k ? ", normalised" : "",
             m.moe_shared_d_ff > 0 ? fmt::format(", shared MLP of width {}", m.moe_shared_d_ff) : "",
             m.moe_capacity_factor > 0 ? fmt::format("capacity factor {}", m.moe_capacity_factor) : "dropless",
             m.moe_aux_loss, m.moe_z_loss, static_cast<double>(model.model().active_matmul_params()) / 1e6,
             ep > 1 ? fmt::format("expert parallel over {} ranks ({} experts each), expert weights reduced over {} rank{}",
                                  ep, m.n_experts / ep, edp, plural(edp))
                    : "every expert on every rank");
}

void RunLog::predicted_memory(const TrainingModel& model, DeviceMesh& mesh) {
  const Transformer& m = model.model();
  const ActivationLayout layout = m.activation_layout();
  // Rank 0's share: under pipeline parallelism its stages' parameters, and one context
  // per micro-batch the schedule keeps in flight (here: per micro-batch).
  const int64_t activations = Transformer::predict_activation_bytes(
      config_.model, config_.micro_batch_size, config_.seq_len, config_.loss_chunk_rows, layout,
      config_.activation_checkpointing, m.local_units(), config_.precision.compute);
  std::vector<ParameterSpec> specs;
  for (const Parameter& p : m.store().params()) {
    if (p.numel() > 0) specs.push_back(p.spec);
  }
  const ModelStateBytes states =
      predict_model_states(local_parameter_specs(specs, layout.tp), mesh.size(Axis::dp_shard_cp), config_.zero_stage,
                           config_.precision.compute, mesh.size(Axis::ep));
  fmt::print(*out_, "memory predicted per rank: params {:.1f} MiB, grads {:.1f} MiB, optimizer {:.1f} MiB (after a step), "
             "activations {:.1f} MiB{}\n",
             mib(states.params), mib(states.grads), mib(states.optimizer), mib(activations),
             model.pipeline() ? " per micro-batch in flight" : "");
  if (config_.offloads()) offload(local_parameter_specs(specs, layout.tp), mesh, activations);
}

void RunLog::offload(const std::vector<ParameterSpec>& specs, DeviceMesh& mesh, int64_t activations) {
  OffloadSettings o;
  o.optimizer = config_.offload_optimizer;
  o.params = config_.offload_params;
  o.chunk_bytes = static_cast<int64_t>(config_.offload_chunk_mb * 1024 * 1024);
  o.prefetch = config_.offload_prefetch;
  o.gather_prefetch = config_.prefetch;
  o.reshard_after_forward = config_.reshard_after_forward;
  o.micro_batches = config_.micro_batches();
  const TieredStates t = predict_tiered_states(specs, mesh.size(Axis::dp_shard_cp), config_.zero_stage, o,
                                               config_.precision.compute, mesh.size(Axis::ep));
  fmt::print(*out_, "offload: {} on disk in {}/rank-NNNNN ({}, chunks of {} KiB, {} read ahead)\n",
             o.params ? "optimizer states, parameter and gradient shards" : "optimizer states",
             config_.offload_folder(), offload::io_backend_name(config_.offload_io), o.chunk_bytes / 1024, o.prefetch);
  fmt::print(*out_, "offload predicted per rank: resident peak {:.1f} MiB (params {:.1f}, grads {:.1f}, optimizer {:.1f}, "
             "activations {:.1f}; communication buffers come on top), disk {:.1f} MiB (params {:.1f}, grads {:.1f}, "
             "optimizer {:.1f}), I/O per step: read {:.1f} MiB, write {:.1f} MiB\n",
             mib(static_cast<size_t>(t.peak.total() + activations)), mib(t.peak.params), mib(t.peak.grads),
             mib(t.peak.optimizer), mib(activations), mib(t.disk.total()), mib(t.disk.params), mib(t.disk.grads),
             mib(t.disk.optimizer), mib(t.read_bytes), mib(t.write_bytes));
}

void RunLog::step(const StepStats& s) {
  if (!out_) return;
  fmt::print(*out_,
             "step {:>5}/{} | loss {:.4f}{} | lr {:.2e} | grad norm {:.3f} | {:>8.0f} tok/s | MFU {:5.1f}%{} | "
             "peak mem {:.1f} MiB | {:.0f} ms{}{}\n",
             s.step + 1, config_.steps, s.loss, s.z_loss > 0 ? fmt::format(" (z-loss {:.2e})", s.z_loss) : "", s.lr,
             s.grad_norm, s.tokens_per_s, 100.0 * s.mfu, hfu_ ? fmt::format(" HFU {:5.1f}%", 100.0 * s.hfu) : "",
             mib(s.peak_bytes), 1e3 * s.seconds,
             (config_.rows_per_rank() < config_.batch_size ? fmt::format(" (comm wait {:.0f} ms)", 1e3 * s.comm_wait_seconds)
                                                           : "") +
                 (config_.offloads() ? fmt::format(" | disk read {:.1f} MiB, write {:.1f} MiB, I/O wait {:.0f} ms",
                                                   mib(static_cast<size_t>(s.io_read_bytes)),
                                                   mib(static_cast<size_t>(s.io_write_bytes)), 1e3 * s.io_wait_seconds)
                                     : ""),
             config_.model.is_moe() ? fmt::format(" | moe aux {:.3e} drop {:.1f}%", s.moe_aux_loss, 100.0 * s.moe_drop_rate)
                                    : "");
  out_->flush();
}

void RunLog::events(const StepStats& s) {
  if (!out_) return;
  if (!s.intervention.empty()) fmt::print(*out_, "step {:>5}/{} | {}\n", s.step + 1, config_.steps, s.intervention);
  for (const StepEvent& e : s.events) {
    if (e.kind == EventKind::overflow) fmt::print(*out_, "step {:>5}/{} | {}\n", s.step + 1, config_.steps, e.text);
  }
}

void RunLog::validation(int64_t steps_done, double loss) {
  if (out_) fmt::print(*out_, "step {:>5}/{} | validation loss {:.4f}\n", steps_done, config_.steps, loss);
}

void RunLog::line(const std::string& text) {
  if (!out_) return;
  fmt::print(*out_, "{}\n", text);
  out_->flush();
}

void RunLog::summary(const RunSummary& summary, DeviceMesh& mesh, const TrainingModel& model, int64_t skipped_batches) {
  if (!out_) return;
  fmt::print(*out_, "\n== summary ==\n");
  const bool validated = !summary.val_losses.empty();
  const std::string validation =
      validated ? fmt::format("validation {:.4f}", summary.val_losses.back().second) : "no validation (stopped)";
  if (summary.losses.empty()) {
    fmt::print(*out_, "loss: no training steps; {} (unigram entropy of the data {:.4f})\n", validation,
               summary.unigram_entropy);
  } else {
    fmt::print(*out_, "loss: first {:.4f}, last {:.4f}; {} (unigram entropy of the data {:.4f})\n",
               summary.losses.front(), summary.losses.back(), validation, summary.unigram_entropy);
  }
  throughput_and_memory(summary, mesh, model);
  stability(summary, skipped_batches);
  for (const nlohmann::json& m : summary.data_mix) {
    fmt::print(*out_, "data mix: {} weight {:.3f}, realised {:.3f} of the rows\n", m["path"].get<std::string>(),
               m["weight"].get<double>(), m["realised"].get<double>());
  }
  if (!summary.sample.empty()) {
    fmt::print(*out_, "\n== sample (prompt \"{}\") ==\n{}{}\n", config_.sample_prompt, config_.sample_prompt,
               summary.sample);
  }
  out_->flush();
}

void RunLog::throughput_and_memory(const RunSummary& summary, DeviceMesh& mesh, const TrainingModel& model) {
  fmt::print(*out_, "throughput: median {:.0f} tokens/s, MFU {:.1f}%, HFU {:.1f}% (with the recomputed forward)\n",
             summary.median_tokens_per_s, 100.0 * summary.median_mfu, 100.0 * summary.median_hfu);
  if (mesh.world().size() > 1) {
    for (Axis axis : reported_axes(mesh.shape())) {
      const CommStats& stats = mesh.axis(axis).stats();
      if (stats.total_wire_bytes() == 0) continue;
      const int64_t across = stats.total_inter_node_wire_bytes();
      fmt::print(*out_, "communication on {} (rank 0): {:.1f} MiB sent{}, {:.2f} s waiting\n", axis_name(axis),
                 mib(static_cast<size_t>(stats.total_wire_bytes())),
                 across > 0 ? fmt::format(" ({:.1f} MiB to other nodes)", mib(static_cast<size_t>(across))) : "",
                 stats.total_wait_seconds());
    }
    fmt::print(*out_, "gradient communication backward did not hide: {:.2f} s\n", model.sync().exposed_wait_seconds());
  }
  const MemoryLedger& ledger = MemoryLedger::instance();
  std::string by_tag;
  for (size_t t = 0; t < kNumMemTags; ++t) {
    const MemTag tag = static_cast<MemTag>(t);
    if (ledger.peak(tag) > 0) by_tag += fmt::format(" {} {:.1f},", mem_tag_name(tag), mib(ledger.peak(tag)));
  }
  if (!by_tag.empty()) by_tag.pop_back();
  fmt::print(*out_, "peak memory: ledger {:.1f} MiB ({} MiB), process RSS {:.1f} MiB\n", mib(ledger.peak_total()),
             by_tag.empty() ? by_tag : by_tag.substr(1), mib(process_peak_rss_bytes()));
}

void RunLog::stability(const RunSummary& s, int64_t skipped_batches) {
  if (s.spikes + s.skipped_steps + s.rollbacks + s.zclips > 0) {
    fmt::print(*out_, "stability: {} spike{} detected, {} update{} skipped, {} rollback{}, {} ZClip clip{}{}\n", s.spikes,
               plural(s.spikes), s.skipped_steps, plural(s.skipped_steps), s.rollbacks, plural(s.rollbacks), s.zclips,
               plural(s.zclips),
               skipped_batches > 0 ? fmt::format("; {} training batches skipped", skipped_batches) : std::string());
  }
  if (config_.scales_loss()) {
    fmt::print(*out_, "loss scaling: {} step{} skipped for overflow; final scale {}\n", s.overflow_skipped_steps,
               plural(s.overflow_skipped_steps), s.final_loss_scale);
  }
}

}  // namespace ndt
