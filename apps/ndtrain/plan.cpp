// `ndtrain plan`: the layouts of a model on a cluster, scored by the planner
// (plan/planner.h): the best as a table with the first one's breakdown, the whole
// search as JSON or CSV; `--validate` holds the planner to runs on this machine
// (plan/validation.h).
#include "apps/ndtrain/commands.h"
#include "core/error.h"
#include "core/output_file.h"
#include "model/transformer.h"
#include "plan/calibration.h"
#include "plan/planner.h"
#include "plan/validation.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>


namespace ndt {

namespace {

std::vector<int> int_list(const std::string& text, const char* option) {
  std::vector<int> values;
  for (const std::string& item : split_comma_list(text)) {
    try {
      size_t used = 0;
      values.push_back(std::stoi(item, &used));
      NDT_CHECK(used == item.size(), "");
    } catch (const std::exception&) {
      fail("{} \"{}\": \"{}\" is not a whole number", option, text, item);
    }
  }
  NDT_CHECK(!values.empty(), "{} \"{}\" lists nothing", option, text);
  return values;
}

PlanSpace search_space(const PlanOptions& o) {
  PlanSpace space;
  if (!o.zero_stages.empty()) space.zero_stages = int_list(o.zero_stages, "--zero-stages");
  for (int z : space.zero_stages) NDT_CHECK(z >= 0 && z <= 3, "--zero-stages: {} is not a ZeRO stage (0 to 3)", z);
  if (!o.micro_batches.empty()) space.micro_batch_sizes = int_list(o.micro_batches, "--micro-batch-sizes");
  for (int b : space.micro_batch_sizes) NDT_CHECK(b >= 1, "--micro-batch-sizes: {} must be at least 1", b);
  if (!o.recompute.empty()) {
    space.recompute.clear();
    for (const std::string& name : split_comma_list(o.recompute)) space.recompute.push_back(checkpoint_mode_from_name(name));
  }
  if (!o.schedules.empty()) {
    space.pp_schedules.clear();
    for (const std::string& name : split_comma_list(o.schedules)) space.pp_schedules.push_back(pipeline_schedule_from_name(name));
  }
  if (!o.cp_modes.empty()) {
    space.cp_modes.clear();
    for (const std::string& name : split_comma_list(o.cp_modes)) space.cp_modes.push_back(cp_mode_from_name(name));
  }
  if (!o.offloads.empty()) {
    space.offloads.clear();
    for (const std::string& name : split_comma_list(o.offloads)) space.offloads.push_back(offload_choice_from_name(name));
  }
  NDT_CHECK(o.max_tp >= 0, "--max-tp {} must not be negative (0: one node's devices)", o.max_tp);
  space.max_tp = o.max_tp;
  return space;
}

void print_best(const LayoutScore& s, const Cluster& cluster) {
  const MemoryEstimate& m = s.memory;
  fmt::print("\nbest: {}\n", s.layout.describe());
  const auto bytes = [](int64_t b) { return memory_text(static_cast<double>(b)); };
  fmt::print("  memory per device{}: {} of {}: parameters {}, gradients {}, optimizer {}, activations {} ({} "
             "micro-batch{} in flight), communication buffers {}\n",
             s.layout.mesh.pp > 1 ? fmt::format(" (pipeline stage {})", s.worst_stage) : "", bytes(m.total()),
             memory_text(cluster.device.memory_bytes), bytes(m.params), bytes(m.grads), bytes(m.optimizer),
             bytes(m.activations), m.in_flight, m.in_flight == 1 ? "" : "es", bytes(m.comm_buffers));
  fmt::print("  step {:.4g} s: compute {:.4g} s, exposed communication {:.4g} s, pipeline bubble {:.4g} s ({:.1f}%), "
             "optimizer {:.4g} s{}; MFU {:.1f}%, HFU {:.1f}%, {:.4g} tokens/s\n",
             s.time.step_s, s.time.compute_s, s.time.exposed_comm_s, s.time.bubble_s, 100 * s.bubble, s.time.optimizer_s,
             s.layout.offload == OffloadChoice::none ? std::string()
                                                     : fmt::format(", offload I/O waited for {:.4g} s", s.time.offload_io_s),
             100 * s.mfu, 100 * s.hfu, s.tokens_per_s);
  if (s.layout.offload != OffloadChoice::none) {
    fmt::print("  offload: {} per device in swap files at {:.2f} GB/s (the profile's disk); the memory above is what "
               "stays resident\n",
               bytes(m.disk), cluster.device.disk_bytes_per_s / 1e9);
  }
  fmt::print("  communication per step and device:\n");
  for (size_t a = 0; a < kNumAxes; ++a) {
    const OpVolume& v = s.comm[a];
    if (v.calls == 0 || is_alias_axis(static_cast<Axis>(a), s.layout.mesh)) continue;
    fmt::print("    {:<12} {:>7} calls {:>12.4g} bytes on the wire  {:.4g} s\n", axis_name(static_cast<Axis>(a)), v.calls,
               static_cast<double>(v.wire_bytes), s.time.comm_s[a]);
  }
}

}  // namespace

int run_plan(const PlanOptions& o) {
  NDT_CHECK(o.calibrate_out.empty() || o.calibrate || o.calibrate_rank, "--out {} requires --calibrate", o.calibrate_out);
  if (o.calibrate_rank) {
    calibrate_ranks(o.calibrate_out);
    return 0;
  }
  if (o.calibrate) {
    NDT_CHECK(o.calibrate_ranks >= 0, "--ranks {} must not be negative (0: --devices-per-node, else 1)", o.calibrate_ranks);
    const int ranks = o.calibrate_ranks > 0 ? o.calibrate_ranks : std::max(1, o.devices_per_node);
    run_calibration(ranks, o.calibrate_out.empty() ? fmt::format("cpu-{}-ranks.toml", ranks) : o.calibrate_out);
    return 0;
  }
  if (o.validate) {
    // --device given with --validate: calibrated device files, one per rank count.
    ValidationOptions v;
    v.dir = o.validate_dir, v.keep = o.keep_runs, v.time_bound_percent = o.time_bound, v.rounds = o.validate_rounds;
    if (o.device_given) v.device_files = split_comma_list(o.device);
    v.models = parse_validation_models(o.validate_models);
    return run_plan_validation(v);
  }
  std::vector<std::string> overrides = o.overrides;
  if (!o.preset.empty()) overrides.insert(overrides.begin(), "model.preset=" + o.preset);
  NDT_CHECK(!o.config.empty() || !o.preset.empty(), "ndtrain plan needs a model: --preset NAME or --config FILE");
  NDT_CHECK(o.top >= 1, "--top {} must be at least 1", o.top);
  NDT_CHECK(o.seq_len >= 0 && o.batch >= 0, "--seq {} and --batch {} must not be negative (0: the config's)", o.seq_len,
            o.batch);
  RunConfig base = read_run_config(o.config, overrides);
  if (o.seq_len > 0) base.seq_len = o.seq_len;
  if (o.batch > 0) base.batch_size = o.batch;
  if (!o.precision.empty()) base.precision.compute = compute_dtype_from_config_name(o.precision, "--precision");
  if (o.fp8) base.precision.fp8 = true;
  NDT_CHECK(base.seq_len <= base.model.max_seq_len, "--seq {} exceeds the model's max_seq_len {} (--set model.max_seq_len=N)",
            base.seq_len, base.model.max_seq_len);
  // This machine is one node: its ranks share its cores, so the profile is measured for
  // as many ranks as the node holds.
  NDT_CHECK(o.cpu_ranks >= 0, "--cpu-ranks {} must not be negative (0: a node's devices)", o.cpu_ranks);
  const int cpu_ranks = o.cpu_ranks > 0                ? o.cpu_ranks
                        : o.devices_per_node > 0 ? o.devices_per_node
                        : o.devices > 0          ? o.devices / std::max(1, o.nodes)
                                                 : 1;
  DeviceProfile device = o.device == "cpu" ? measure_cpu_device(std::max(1, cpu_ranks), o.disk_dir) : resolve_device(o.device);
  NDT_CHECK(o.inter_node_gbps >= 0 && std::isfinite(o.inter_node_gbps), "--inter-node-gbps {} must be a positive "
            "number of Gbit/s (0: the profile's)", o.inter_node_gbps);
  NDT_CHECK(o.inter_node_latency_us >= 0 && std::isfinite(o.inter_node_latency_us), "--inter-node-latency-us {} must "
            "not be negative (0: the profile's)", o.inter_node_latency_us);
  if (o.inter_node_gbps > 0) {
    device.inter_node.bytes_per_s = o.inter_node_gbps * 1e9 / 8;
    device.source += fmt::format("; between nodes {:g} Gbit/s per link (--inter-node-gbps), {}", o.inter_node_gbps,
                                 device.inter_node_links > 0 ? fmt::format("{} per node", device.inter_node_links)
                                                             : std::string("one per device"));
  }
  if (o.inter_node_latency_us > 0) device.inter_node.latency_s = o.inter_node_latency_us * 1e-6;
  Cluster cluster = make_cluster(device, o.nodes, o.devices_per_node, o.devices);
  NDT_CHECK(o.expert_load >= 1 && std::isfinite(o.expert_load),
            "--expert-load {} must be at least 1 (the most loaded ep rank over the mean rank; 1: balanced)",
            o.expert_load);
  cluster.expert_load = o.expert_load;
  const PlanSpace space = search_space(o);

  const ModelConfig& m = base.model;
  fmt::print("model: {} layers, d_model {}, {} heads ({} kv), d_ff {}, vocab {}{}: {:.4g}B parameters\n", m.n_layer,
             m.d_model, m.n_head, m.kv_heads(), m.d_ff, m.vocab_size,
             m.is_moe() ? fmt::format(", {} experts top-{}", m.n_experts, m.moe_top_k) : "",
             static_cast<double>(count_parameters(m)) / 1e9);
  fmt::print("run: {} sequences of {} tokens per step ({:.4g}M tokens), compute {}{}\n", base.batch_size, base.seq_len,
             static_cast<double>(base.batch_size) * base.seq_len / 1e6, compute_dtype_config_name(base.precision.compute),
             base.precision.fp8 ? " with fp8 linear layers" : "");
  fmt::print("device: {}: {}\n", device.name, device.source);
  if (m.vocab_size > 65536) {
    fmt::print("note: model.vocab_size = {} is planned, but ndtrain's token shards hold uint16 tokens (65536 at most)\n",
               m.vocab_size);
  }
  const PlanResult result = plan_layouts(base, cluster, space);
  fmt::print("{}", render_plan_table(result, cluster, o.top));
  if (result.fitting > 0) print_best(result.layouts.front(), cluster);
  if (!o.json.empty()) {
    AtomicFile file(o.json);
    const std::string head = nlohmann::json({{"devices", cluster.devices()},
                                             {"nodes", cluster.nodes},
                                             {"device", device.name},
                                             {"device_source", device.source},
                                             {"candidates", result.candidates},
                                             {"fitting", result.fitting},
                                             {"out_of_memory", result.out_of_memory},
                                             {"invalid", result.invalid},
                                             {"seconds", result.seconds}})
                                 .dump();
    // The header's fields, then the layouts one per line (a large search is written as it goes).
    const std::string open = head.substr(0, head.size() - 1) + ",\"layouts\":[\n";
    file.write(open.data(), open.size());
    for (size_t i = 0; i < result.layouts.size(); ++i) {
      const std::string line = layout_json(result.layouts[i]).dump() + (i + 1 < result.layouts.size() ? ",\n" : "\n");
      file.write(line.data(), line.size());
    }
    file.write("]}\n", 3);
    file.commit();
    fmt::print("\nwrote every layout to {}\n", o.json);
  }
  if (!o.csv.empty()) {
    const std::string csv = plan_csv(result);
    AtomicFile file(o.csv);
    file.write(csv.data(), csv.size());
    file.commit();
    fmt::print("wrote every layout to {}\n", o.csv);
  }
  return result.fitting > 0 ? 0 : 3;
}

}  // namespace ndt
