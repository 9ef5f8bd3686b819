#include "train/metrics_writer.h"

#include "core/error.h"
#include "core/memory.h"
#include "core/output_file.h"
#include "model/transformer.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>

namespace ndt {

namespace {

// JSON has no NaN or infinity: a non-finite value is written as its text ("nan", "inf").
nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(fmt::format("{}", v)); }

// Each tag's current bytes and its peak since the process started (the ledger's peaks
// are never reset here: peak_mem_bytes is the peak since the start too).
nlohmann::json memory_record() {
  const MemoryLedger& ledger = MemoryLedger::instance();
  nlohmann::json mem = nlohmann::json::object();
  for (size_t t = 0; t < kNumMemTags; ++t) {
    const MemTag tag = static_cast<MemTag>(t);
    mem[std::string(mem_tag_name(tag))] = {{"current", ledger.current(tag)}, {"peak", ledger.peak(tag)}};
  }
  return mem;
}

// Offload: each tag's bytes in swap files (the ledger's disk tier), beside memory_record.
nlohmann::json disk_record() {
  const MemoryLedger& ledger = MemoryLedger::instance();
  nlohmann::json disk = nlohmann::json::object();
  for (size_t t = 0; t < kNumMemTags; ++t) {
    const MemTag tag = static_cast<MemTag>(t);
    if (ledger.disk_peak(tag) > 0) disk[std::string(mem_tag_name(tag))] = ledger.disk_current(tag);
  }
  return disk;
}

nlohmann::json peak_memory_by_tag() {
  const MemoryLedger& ledger = MemoryLedger::instance();
  nlohmann::json mem;
  for (size_t t = 0; t < kNumMemTags; ++t) {
    mem[std::string(mem_tag_name(static_cast<MemTag>(t)))] = ledger.peak(static_cast<MemTag>(t));
  }
  return mem;
}

nlohmann::json comm_record(DeviceMesh& mesh) {
  nlohmann::json record = nlohmann::json::object();
  for (Axis axis : reported_axes(mesh.shape())) {
    const CommStats& stats = mesh.axis(axis).stats();
    nlohmann::json ops = nlohmann::json::object();
    for (size_t op = 0; op < kNumCommOps; ++op) {
      const CommCounter& c = stats.ops[op];
      if (c.calls == 0) continue;
      nlohmann::json counters = {{"calls", c.calls}, {"wire_bytes", c.wire_bytes}, {"wait_s", c.wait_seconds},
                                 {"progress_s", c.progress_seconds}};
      if (c.inter_node_wire_bytes > 0) counters["inter_node_wire_bytes"] = c.inter_node_wire_bytes;
      ops[std::string(comm_op_name(static_cast<CommOp>(op)))] = counters;
    }
    if (!ops.empty()) record[std::string(axis_name(axis))] = ops;
  }
  return record;
}

nlohmann::json step_events(const StepStats& s) {
  nlohmann::json events = nlohmann::json::array();
  for (const StepEvent& e : s.events) events.push_back({{"kind", event_kind_name(e.kind)}, {"text", e.text}});
  return events;
}

// train.profile: the step's slowest rank (train/step_profile.h) and its seconds per op
// class (the classes no kernel of the step ran left out), communication, barriers and the
// unaccounted rest.
nlohmann::json profile_record(const StepProfile& p) {
  nlohmann::json record = nlohmann::json::object();
  for (size_t c = 0; c < kernels::kNumOpClasses; ++c) {
    const auto op_class = static_cast<kernels::OpClass>(c);
    if (op_class != kernels::OpClass::untimed && p.kernels[c] > 0) record[std::string(kernels::op_class_key(op_class))] = p.kernels[c];
  }
  record["rank"] = p.rank;
  record["step_s"] = p.step_seconds;  // that rank's: the classes add up to it
  record["communication"] = p.communication;
  record["rank_wait"] = p.rank_wait;
  record["unaccounted"] = p.unaccounted();
  return record;
}

}  // namespace

std::vector<Axis> reported_axes(const MeshShape& mesh) {
  // Without cp, dp_cp and dp_shard_cp are dp's and dp_shard's communicators themselves.
  std::vector<Axis> axes = {Axis::dp, Axis::dp_shard, Axis::dp_replicate, Axis::tp, Axis::pp};
  if (mesh.cp > 1) {
    axes = {Axis::dp_cp, Axis::dp_shard_cp, Axis::dp, Axis::dp_shard, Axis::dp_replicate, Axis::cp, Axis::tp, Axis::pp};
  }
  // With ep > 1, its groups (edp is dp_cp's communicator otherwise, edp_shard dp_shard_cp's).
  if (mesh.ep > 1) axes.insert(axes.end(), {Axis::ep, Axis::edp, Axis::edp_shard});
  // USP's two parts of cp (without USP cp_ring is cp's communicator and cp_ulysses each rank alone).
  if (mesh.cp_ulysses > 1) axes.insert(axes.end(), {Axis::cp_ulysses, Axis::cp_ring});
  return axes;
}

MetricsWriter::MetricsWriter(const std::string& path, bool append) : path_(path) {
  if (!path.empty()) log_ = std::make_unique<MetricsLog>(path, append);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!log_ || failure_) return;
  try {
    log_->write(record);
  } catch (const Error& e) {
    failure_ = e.what();
  }
}

void MetricsWriter::run(const RunConfig& config, const MeshShape& mesh, int world_size, int64_t start_step,
                        const PeakFlops& peak) {
  nlohmann::json values = nlohmann::json::object();
  for (const auto& [key, value] : run_config_values(config)) values[key] = value;
  const nlohmann::json run = {{"start_step", start_step},
                              {"resumed", !config.resume.empty()},
                              {"world_size", world_size},
                              {"mesh",
                               {{"pp", mesh.pp},
                                {"dp_replicate", mesh.dp_replicate},
                                {"dp_shard", mesh.dp_shard},
                                {"cp", mesh.cp},
                                {"tp", mesh.tp},
                                {"ep", mesh.ep}}},
                              {"parameters", count_parameters(config.model)},
                              {"peak_flops", peak.flops_per_s},
                              {"peak_flops_source", peak.source},
                              {"config", values}};
  write({{"run", run}});
}

void MetricsWriter::step(const StepStats& s, const RunConfig& config, DeviceMesh& mesh, const PipelineRunner* pipeline) {
  nlohmann::json record = {{"step", s.step + 1},      {"loss", number(s.loss)},        {"lr", s.lr},
                           {"grad_norm", number(s.grad_norm)}, {"step_s", s.seconds}, {"tokens_per_s", s.tokens_per_s},
                           {"mfu", s.mfu},            {"hfu", s.hfu},                  {"peak_mem_bytes", s.peak_bytes},
                           {"mem", memory_record()}};
  if (config.offloads()) {
    record["io"] = {{"read_bytes", s.io_read_bytes}, {"write_bytes", s.io_write_bytes}, {"wait_s", s.io_wait_seconds}};
    record["disk"] = disk_record();
  }
  if (config.scales_loss()) record["loss_scale"] = s.loss_scale;
  if (config.z_loss > 0) record["z_loss"] = number(s.z_loss);
  if (config.model.is_moe()) {
    record["moe"] = {{"aux_loss", number(s.moe_aux_loss)},
                     {"z_loss", number(s.moe_z_loss)},
                     {"drop_rate", s.moe_drop_rate},
                     {"tokens_per_expert", s.moe_tokens_per_expert},
                     {"expert_load", s.moe_expert_load}};
  }
  if (s.overflow_skipped) {
    record["update_skipped"] = fmt::format("overflow at loss scale {}: scale now {}", s.loss_scale, s.next_loss_scale);
  } else if (!s.finite) {
    record["update_skipped"] = "non-finite loss or gradient norm";
  }
  if (!s.intervention.empty()) record["intervention"] = s.intervention;
  if (!s.events.empty()) record["events"] = step_events(s);
  if (pipeline) {
    // This rank's measured bubble: its time outside compute actions, over its schedule's time.
    const PipelineStepTimes& t = pipeline->last_step_times();
    record["pp_bubble"] = t.wall > 0 ? 1.0 - t.busy / t.wall : 0.0;
  }
  if (mesh.world().size() > 1) record["comm"] = comm_record(mesh), record["dp_exposed_wait_s"] = s.comm_wait_seconds;
  if (s.profile) record["profile"] = profile_record(*s.profile);
  write(record);
  for (const StepEvent& e : s.events) write({{"step", s.step + 1}, {"kind", event_kind_name(e.kind)}, {"event", e.text}});
}

void MetricsWriter::validation(int64_t steps_done, double loss) { write({{"step", steps_done}, {"val_loss", loss}}); }

void MetricsWriter::layout_check(const LayoutCheckResult& check, int64_t step) {
  const LayoutPrediction& p = check.predicted;
  write({{"layout_check",
          {{"step", step},
           {"layout", p.layout},
           {"device", p.device},
           {"predicted_step_s", p.step_s},
           {"measured_step_s", check.measured_step_s},
           {"measured_steps", check.steps},
           {"error", check.error()},
           {"predicted_memory_bytes", p.memory_bytes},
           {"predicted_mfu", p.mfu},
           {"runner_up", p.runner_up},
           {"runner_up_predicted_step_s", p.runner_up_step_s}}}});
}

void MetricsWriter::summary(const RunSummary& summary, DeviceMesh& mesh) {
  const bool trained = !summary.losses.empty();  // train.steps = 0 trains nothing
  const bool validated = !summary.val_losses.empty();
  const double at_end = summary.peak_flops_at_end;  // train.profile's; null without it
  write({{"summary",
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
           {"peak_mem_bytes", MemoryLedger::instance().peak_total()},
           {"peak_mem_by_tag", peak_memory_by_tag()},
           {"peak_rss_bytes", process_peak_rss_bytes()},
           {"comm", comm_record(mesh)},
           {"data_mix", summary.data_mix},
           {"peak_flops_at_end", at_end > 0 ? nlohmann::json(at_end) : nlohmann::json()}}}});
}

void MetricsWriter::pipeline_timeline(const std::string& out_dir,
                                      const std::vector<std::vector<TimedPipelineAction>>& timeline, int64_t step,
                                      const RunConfig& config, const PipelineShape& shape) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const std::vector<TimedPipelineAction>& rank : timeline) {
    nlohmann::json actions = nlohmann::json::array();
    for (const TimedPipelineAction& t : rank) {
      actions.push_back({{"kind", pipeline_action_kind_name(t.action.kind)},
                         {"micro_batch", t.action.micro_batch},
                         {"chunk", t.action.chunk},
                         {"peer", t.action.peer},
                         {"seq_chunk", t.action.seq_chunk},
                         {"start_s", t.start},
                         {"end_s", t.end}});
    }
    ranks.push_back(actions);
  }
  const nlohmann::json file = {{"step", step},
                               {"schedule", pipeline_schedule_name(config.pp_schedule)},
                               {"pp", shape.pp},
                               {"virtual_stages", shape.v},
                               {"micro_batches", shape.m},
                               {"seq_chunks", shape.seq_chunks},
                               {"ranks", ranks}};
  AtomicFile out(std::filesystem::path(out_dir) / "pipeline_timeline.json");
  const std::string text = file.dump() + '\n';
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace ndt
