#include "plan/planner.h"

#include "core/error.h"
#include "model/activation_layout.h"
#include "model/activations.h"
#include "model/transformer.h"
#include "parallel/memory_model.h"
#include "parallel/offload_model.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/simulator.h"
#include "parallel/pipeline/stages.h"
#include "parallel/tensor/tensor_parallel.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <thread>
#include <tuple>

namespace ndt {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i) {
    if (n % i == 0) d.push_back(i);
  }
  return d;
}

// Latency hops of one call of `op` over n ranks (ring algorithms; tree for broadcast
// and barrier).
double hops(CommOp op, int n) {
  if (n <= 1) return 0;
  switch (op) {
    case CommOp::all_reduce: return 2.0 * (n - 1);
    case CommOp::reduce_scatter:
    case CommOp::all_gather:
    case CommOp::all_to_all:
    case CommOp::all_to_all_v: return n - 1;
    case CommOp::send:
    case CommOp::recv: return 1;
    default: return std::ceil(std::log2(n));
  }
}

// The world ranks one group of `axis` spans: the mesh is row-major in (pp, dp_replicate,
// dp_shard, cp, tp), tp innermost (core/axis.h), and consecutive world ranks share a node.
int64_t axis_extent(Axis axis, const MeshShape& m) {
  const int64_t tp = m.tp, cp = m.cp, sh = m.dp_shard, rep = m.dp_replicate;
  switch (axis) {
    case Axis::tp: return tp;
    case Axis::cp: return tp * cp;
    case Axis::ep: return tp * m.ep;
    case Axis::dp_shard:
    case Axis::dp_shard_cp:
    case Axis::edp_shard: return tp * cp * sh;
    case Axis::dp_replicate:
    case Axis::dp:
    case Axis::dp_cp:
    case Axis::edp: return tp * cp * sh * rep;
    case Axis::pp: return tp * cp * sh * rep * m.pp;
  }
  return 1;
}

const LinkProfile& axis_link(Axis axis, const MeshShape& m, const Cluster& cluster) {
  const int64_t extent = axis_extent(axis, m);
  const bool inside = extent <= cluster.devices_per_node && cluster.devices_per_node % extent == 0;
  return inside ? cluster.device.intra_node : cluster.device.inter_node;
}


// Alpha-beta time of a rank's calls of one operation: hops x latency per call plus the
// wire bytes over the bandwidth. An all-reduce takes the better of the ring (the wire
// bytes the counters count) and a tree (2 log2 n hops, twice the payload on the wire),
// as NCCL chooses between them: a one-float all-reduce over 16K ranks is a tree's 28
// hops, not a ring's 32766.
double op_seconds(CommOp op, const OpVolume& v, int group, const LinkProfile& link) {
  if (v.calls == 0) return 0;
  const double calls = static_cast<double>(v.calls);
  const double ring = calls * hops(op, group) * link.latency_s + static_cast<double>(v.wire_bytes) / link.bytes_per_s;
  if (op != CommOp::all_reduce || group <= 2) return ring;
  const double tree = calls * 2 * std::ceil(std::log2(group)) * link.latency_s +
                      2.0 * static_cast<double>(v.payload_bytes) / link.bytes_per_s;
  return std::min(ring, tree);
}

bool is_gradient_axis(Axis a) {
  return a == Axis::dp_replicate || a == Axis::dp_shard || a == Axis::dp || a == Axis::dp_shard_cp ||
         a == Axis::dp_cp || a == Axis::edp || a == Axis::edp_shard;
}

// The schedule's bubble and live activations at the textbook costs (backward twice the
// forward), per (schedule, pp, v, m): the planner's layouts share a few shapes.
struct PipelineFacts {
  double bubble = 0;
  std::vector<int> contexts;  // per rank: micro-batch contexts held at once
};

const PipelineFacts& pipeline_facts(PipelineSchedule schedule, const PipelineShape& shape) {
  thread_local std::map<std::tuple<int, int, int, int>, PipelineFacts> cache;
  const auto key = std::make_tuple(static_cast<int>(schedule), shape.pp, shape.v, shape.m);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const PipelineSimulation s = simulate_pipeline(schedule, shape);
  return cache.emplace(key, PipelineFacts{s.mean_bubble, s.peak_live_contexts}).first->second;
}

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / kGiB); }

std::string overflow_message(const MemoryEstimate& m, int stage, int pp, double budget) {
  const std::array<std::pair<const char*, int64_t>, 5> parts = {
      {{"parameters", m.params}, {"gradients", m.grads}, {"optimizer states", m.optimizer},
       {"activations", m.activations}, {"communication buffers", m.comm_buffers}}};
  const auto largest = std::max_element(parts.begin(), parts.end(),
                                        [](const auto& a, const auto& b) { return a.second < b.second; });
  std::string where = pp > 1 ? fmt::format(" on pipeline stage {}", stage) : "";
  return fmt::format(
      "out of memory{}: {} needed, {} over the device's {}; the largest part, {}, is {} ({:.0f}%) (parameters {}, "
      "gradients {}, optimizer states {}, activations {} for {} micro-batch{} in flight, communication buffers {})",
      where, gib(static_cast<double>(m.total())), gib(static_cast<double>(m.total()) - budget), gib(budget),
      largest->first, gib(static_cast<double>(largest->second)),
      100.0 * static_cast<double>(largest->second) / static_cast<double>(m.total()), gib(static_cast<double>(m.params)),
      gib(static_cast<double>(m.grads)), gib(static_cast<double>(m.optimizer)), gib(static_cast<double>(m.activations)),
      m.in_flight, m.in_flight == 1 ? "" : "es",
      m.comm_buffers > 0 ? gib(static_cast<double>(m.comm_buffers)) : std::string("not counted"));
}

}  // namespace

bool is_alias_axis(Axis axis, const MeshShape& m) {
  if ((axis == Axis::dp_shard_cp || axis == Axis::dp_cp) && m.cp == 1) return true;
  if ((axis == Axis::edp || axis == Axis::edp_shard) && m.ep == 1) return true;
  return false;
}

std::string memory_text(double bytes) {
  return bytes >= kGiB ? fmt::format("{:.1f}G", bytes / kGiB) : fmt::format("{:.1f}M", bytes / (1024.0 * 1024.0));
}

std::string_view offload_choice_name(OffloadChoice choice) {
  switch (choice) {
    case OffloadChoice::optimizer: return "optimizer";
    case OffloadChoice::params: return "params";
    default: return "none";
  }
}

OffloadChoice offload_choice_from_name(std::string_view name) {
  for (OffloadChoice c : {OffloadChoice::none, OffloadChoice::optimizer, OffloadChoice::params}) {
    if (name == offload_choice_name(c)) return c;
  }
  fail("--offload: \"{}\" is not an offload choice: none, optimizer or params", name);
}

Layout Layout::of(const RunConfig& c) {
  Layout l;
  l.mesh = c.mesh;
  l.zero_stage = c.zero_stage;
  l.sequence_parallel = c.sequence_parallel;
  l.cp_mode = c.cp_mode;
  l.micro_batch_size = c.micro_batch_size;
  l.recompute = c.activation_checkpointing.mode;
  l.pp_schedule = c.pp_schedule;
  l.pp_virtual_stages = c.pp_virtual_stages;
  l.offload = c.offload_params ? OffloadChoice::params : c.offload_optimizer ? OffloadChoice::optimizer : OffloadChoice::none;
  return l;
}

RunConfig Layout::apply(RunConfig c) const {
  c.mesh = mesh;
  c.zero_stage = zero_stage;
  c.sequence_parallel = sequence_parallel;
  c.cp_mode = cp_mode;
  c.micro_batch_size = micro_batch_size;
  c.activation_checkpointing = {recompute, 1};
  c.pp_schedule = pp_schedule;
  c.pp_virtual_stages = pp_virtual_stages;
  c.pp_layers.clear();
  c.offload_optimizer = offload != OffloadChoice::none;
  c.offload_params = offload == OffloadChoice::params;
  return c;
}

std::string Layout::describe() const {
  std::string axes;
  for (const auto& [name, size] : {std::pair{"pp", mesh.pp}, {"dp_replicate", mesh.dp_replicate},
                                   {"dp_shard", mesh.dp_shard}, {"cp", mesh.cp}, {"tp", mesh.tp}, {"ep", mesh.ep}}) {
    if (size > 1) axes += fmt::format("{}{}{}", axes.empty() ? "" : " ", name, size);
  }
  if (axes.empty()) axes = "one device";
  if (mesh.tp > 1 && sequence_parallel) axes += " +sp";
  if (mesh.cp > 1) axes += fmt::format(" {}", cp_mode_name(cp_mode));
  const std::string sharding = zero_stage == 3 ? "fsdp" : zero_stage > 0 ? fmt::format("zero{}", zero_stage) : "ddp";
  std::string pipeline;
  if (mesh.pp > 1) {
    pipeline = fmt::format(" | {}{}", pipeline_schedule_name(pp_schedule),
                           pp_virtual_stages > 1 ? fmt::format(" v{}", pp_virtual_stages) : "");
  }
  return fmt::format("{} | {} | mb{} | {}{}{}", axes, sharding, micro_batch_size, checkpoint_mode_name(recompute),
                     pipeline, offload == OffloadChoice::none ? "" : fmt::format(" | offload {}", offload_choice_name(offload)));
}

// What scoring layouts of one model and run shares, computed once: the parameter specs
// and FLOPs per unit, each pipeline split, each stage's tp-local specs.
class LayoutScorer {
 public:
  explicit LayoutScorer(const RunConfig& base)
      : model_(base.model),
        seq_len_(base.seq_len),
        loss_chunk_rows_(base.loss_chunk_rows),
        specs_(model_parameter_specs(base.model)),
        unit_flops_(unit_flops_per_token(base.model, base.seq_len)) {}

  LayoutScore score(const RunConfig& config, const Cluster& cluster);

 private:
  const std::vector<double>& recompute_flops(const RunConfig& c, bool cp) {
    const auto key = std::make_tuple(static_cast<int>(c.activation_checkpointing.mode), c.activation_checkpointing.every, cp);
    auto it = recompute_.find(key);
    if (it == recompute_.end()) {
      it = recompute_.emplace(key, unit_recompute_flops_per_token(model_, c.seq_len, c.activation_checkpointing, cp)).first;
    }
    return it->second;
  }
  const PipelineStages& stages(const RunConfig& c, int chunks) {
    auto it = stages_.find(chunks);
    if (it == stages_.end()) it = stages_.emplace(chunks, partition_pipeline(model_, c.seq_len, chunks)).first;
    return it->second;
  }
  const std::vector<char>& stage_local_units(int pp, int v, int stage, const PipelineStages& split) {
    const auto key = std::make_tuple(pp, v, stage);
    auto it = local_units_.find(key);
    if (it == local_units_.end()) it = local_units_.emplace(key, split.local_units(stage, pp)).first;
    return it->second;
  }
  // One tp rank's parameter specs of pipeline rank `stage` (pp = 1: the whole model).
  const std::vector<ParameterSpec>& stage_specs(int tp, int pp, int v, int stage, const std::vector<char>& local_units) {
    const auto key = std::make_tuple(tp, pp, v, stage);
    auto it = stage_specs_.find(key);
    if (it != stage_specs_.end()) return it->second;
    std::vector<ParameterSpec> specs;
    for (const ParameterSpec& spec : specs_) {
      if (local_units.empty() || local_units[static_cast<size_t>(spec.unit)]) specs.push_back(spec);
    }
    // A tied output layer's weight lives on the first and the last stage.
    const bool head = !local_units.empty() && local_units.back() && !local_units.front();
    if (model_.tied_embeddings && head) specs.push_back(specs_.front());
    return stage_specs_.emplace(key, local_parameter_specs(std::move(specs), tp)).first->second;
  }

  // predict_model_states and Transformer::predict_activation_bytes of a stage, remembered:
  // layouts differing only in other axes share them.
  // Offloaded: each state's resident peak (the offload model's), with what is on disk and moved.
  TieredStates model_states(const RunConfig& c, const MeshShape& m, int stage, const std::vector<char>& local_units) {
    const int offload = c.offload_params ? 2 : c.offload_optimizer ? 1 : 0;
    const auto key = std::make_tuple(m.tp, m.pp * 64 + offload, c.pp_virtual_stages * 4096 + c.micro_batches(), stage,
                                     m.size(Axis::dp_shard_cp), c.zero_stage, static_cast<int>(c.precision.compute), m.ep);
    auto it = states_.find(key);
    if (it == states_.end()) {
      const std::vector<ParameterSpec>& specs = stage_specs(m.tp, m.pp, c.pp_virtual_stages, stage, local_units);
      TieredStates t;
      if (offload == 0) {
        t.resident = predict_model_states(specs, m.size(Axis::dp_shard_cp), c.zero_stage, c.precision.compute, m.ep);
      } else {
        OffloadSettings o;
        o.optimizer = true, o.params = offload == 2;
        o.chunk_bytes = static_cast<int64_t>(c.offload_chunk_mb * 1024 * 1024);
        o.prefetch = c.offload_prefetch, o.gather_prefetch = c.prefetch;
        o.reshard_after_forward = c.reshard_after_forward, o.micro_batches = c.micro_batches();
        t = predict_tiered_states(specs, m.size(Axis::dp_shard_cp), c.zero_stage, o, c.precision.compute, m.ep);
        t.resident = t.peak;
      }
      it = states_.emplace(key, t).first;
    }
    return it->second;
  }
  int64_t activation_bytes(const RunConfig& c, const ActivationLayout& layout, int mb, const MeshShape& m, int stage,
                           const std::vector<char>& local_units, const ActivationCheckpointing& policy) {
    const auto key = std::make_tuple(m.tp, layout.sequence_parallel, m.cp, static_cast<int>(layout.cp.mode), mb,
                                     static_cast<int>(policy.mode), policy.every, m.pp * 1000 + c.pp_virtual_stages,
                                     stage, static_cast<int>(c.precision.compute));
    auto it = activations_.find(key);
    if (it == activations_.end()) {
      it = activations_.emplace(key, Transformer::predict_activation_bytes(model_, mb, c.seq_len, c.loss_chunk_rows, layout,
                                                                            policy, local_units, c.precision.compute))
               .first;
    }
    return it->second;
  }

  ModelConfig model_;
  int seq_len_, loss_chunk_rows_;
  std::map<std::tuple<int, int, int, int, int, int, int, int>, TieredStates> states_;
  std::map<std::tuple<int, bool, int, int, int, int, int, int, int, int>, int64_t> activations_;
  std::vector<ParameterSpec> specs_;
  std::vector<double> unit_flops_;
  std::map<std::tuple<int, int, bool>, std::vector<double>> recompute_;
  std::map<int, PipelineStages> stages_;
  std::map<std::tuple<int, int, int>, std::vector<char>> local_units_;
  std::map<std::tuple<int, int, int, int>, std::vector<ParameterSpec>> stage_specs_;
};

LayoutScore LayoutScorer::score(const RunConfig& config, const Cluster& cluster) {
  // What the caches were filled for.
  NDT_CHECK(config.seq_len == seq_len_ && config.loss_chunk_rows == loss_chunk_rows_ &&
                config.model.n_layer == model_.n_layer && config.model.d_model == model_.d_model,
            "LayoutScorer: a config of another model or run");
  LayoutScore s;
  config.validate_layout();
  const RunConfig resolved =
      config.resolved(RunConfig::JobShape{cluster.devices(), cluster.devices_per_node, cluster.devices_per_node});
  const MeshShape& m = resolved.mesh;
  s.layout = Layout::of(config);
  s.layout.mesh = m;
  const ModelConfig& model = config.model;
  const DeviceProfile& device = cluster.device;
  const int mb = resolved.micro_batch_size;
  const int micro_batches = resolved.micro_batches();
  const int T = config.seq_len;
  const DType compute = config.precision.compute;
  const double peak = device.peak_flops(compute, config.precision.fp8);
  const double gemm_rate = peak * device.gemm_efficiency;

  ActivationLayout layout;
  layout.tp = m.tp;
  layout.sequence_parallel = config.sequence_parallel;
  layout.cp = CpLayout{m.cp, config.cp_mode, config.cp_chunks};

  const PipelineSchedule schedule = config.pp_schedule;
  const PipelineShape shape{m.pp, config.pp_virtual_stages, micro_batches};
  const PipelineFacts* facts = m.pp > 1 ? &pipeline_facts(schedule, shape) : nullptr;
  const PipelineStages* split = nullptr;
  if (m.pp > 1) {
    NDT_CHECK(config.pp_layers.empty(), "the planner balances pipeline stages itself: parallel.pp_layers = \"{}\"",
              config.pp_layers);
    split = &stages(config, m.pp * config.pp_virtual_stages);
  }
  const std::vector<double>& unit_flops = unit_flops_;
  const std::vector<double>& unit_recompute = recompute_flops(config, m.cp > 1);
  // Tokens of one micro-batch on one rank; tp ranks split the matmuls' FLOPs.
  const double tokens_mb = static_cast<double>(mb) * T / m.cp;
  const double budget = device.memory_bytes;

  // Memory first, for every stage: a layout whose model states and activations already
  // overflow is rejected without predicting its communication.
  std::vector<std::vector<char>> stage_units(static_cast<size_t>(m.pp));
  std::vector<int64_t> contexts(static_cast<size_t>(m.pp));
  double worst_memory = -1;
  for (int stage = 0; stage < m.pp; ++stage) {
    std::vector<char>& local_units = stage_units[static_cast<size_t>(stage)];
    if (split) local_units = stage_local_units(m.pp, config.pp_virtual_stages, stage, *split);
    MemoryEstimate mem;
    const TieredStates& tiers = model_states(resolved, m, stage, local_units);
    const ModelStateBytes& states = tiers.resident;
    mem.params = states.params, mem.grads = states.grads, mem.optimizer = states.optimizer;
    mem.disk = tiers.disk.total();
    const int64_t one_context = activation_bytes(config, layout, mb, m, stage, local_units, config.activation_checkpointing);
    contexts[static_cast<size_t>(stage)] = one_context;
    // A context per micro-batch in flight (all of the rank's chunks: one context serves
    // a micro-batch from its first chunk's forward to its last chunk's backward), and one
    // workspace they share.
    mem.in_flight = facts ? facts->contexts[static_cast<size_t>(stage)] : 1;
    const int64_t workspace = workspace_floats(model, layout, mb, T / m.cp, config.loss_chunk_rows,
                                               config.activation_checkpointing, compute) * 4;
    mem.activations = mem.in_flight * (one_context - workspace) + workspace;
    s.stages.push_back(mem);
    if (static_cast<double>(mem.total()) > worst_memory) worst_memory = static_cast<double>(mem.total()), s.worst_stage = stage;
  }
  if (worst_memory > budget) {
    s.memory = s.stages[static_cast<size_t>(s.worst_stage)];
    s.rejected = overflow_message(s.memory, s.worst_stage, m.pp, budget);
    return s;
  }

  // Stages holding the same kinds of units in the same places of the pipeline communicate
  // alike: the communication model runs once per kind.
  std::map<std::string, std::pair<StepCommunication, int64_t>> by_kind;
  const auto stage_kind = [&](int stage) {
    const std::vector<char>& units = stage_units[static_cast<size_t>(stage)];
    std::string kind = {stage == 0 ? 'F' : '-', stage == m.pp - 1 ? 'L' : '-', ':'};
    for (int u = 0; u < static_cast<int>(units.size()); ++u) {
      if (!units[static_cast<size_t>(u)]) {
        if (!kind.empty() && kind.back() != '|') kind += '|';
        continue;
      }
      kind += u == 0 ? 'E' : u == model.n_layer + 1 ? 'H' : model.is_moe_block(u - 1) ? 'M' : 'D';
    }
    return kind;
  };
  worst_memory = -1;
  double slowest_stage = 0, worst_tail = 0;
  for (int stage = 0; stage < m.pp; ++stage) {
    const std::vector<char>& local_units = stage_units[static_cast<size_t>(stage)];
    const auto runs = [&](int unit) { return local_units.empty() || local_units[static_cast<size_t>(unit)]; };
    MemoryEstimate& mem = s.stages[static_cast<size_t>(stage)];
    const std::string kind = m.pp > 1 ? stage_kind(stage) : std::string();
    auto known = by_kind.find(kind);
    if (known == by_kind.end()) {
      known = by_kind
                  .emplace(kind, std::pair{predict_step_communication(config, cluster.devices(), stage, split),
                                           predict_comm_buffer_bytes(config, cluster.devices(), stage, split)})
                  .first;
    }
    const StepCommunication& comm = known->second.first;
    mem.comm_buffers = known->second.second;
    const ModelStateBytes states{mem.params, mem.grads, mem.optimizer};

    // Roofline of one micro-batch through this stage: the matmuls at the GEMM rate, and
    // the activations written in forward and read and written again in backward at the
    // memory bandwidth.
    double flops = 0, recompute = 0, attention = 0;
    for (int u = 0; u < static_cast<int>(unit_flops.size()); ++u) {
      if (!runs(u)) continue;
      flops += unit_flops[static_cast<size_t>(u)];
      recompute += unit_recompute[static_cast<size_t>(u)];
      if (u >= 1 && u <= model.n_layer) attention += 12.0 * model.d_model * static_cast<double>(T);
    }
    const int64_t traffic = config.activation_checkpointing.mode == CheckpointMode::none
                                ? contexts[static_cast<size_t>(stage)]
                                : activation_bytes(config, layout, mb, m, stage, local_units, {});
    const double memory_s = 3.0 * static_cast<double>(traffic) / device.memory_bytes_per_s;
    const double forward_s = flops / 3 * tokens_mb / m.tp / gemm_rate + memory_s / 3;
    const double backward_s = (flops * 2 / 3 + recompute) * tokens_mb / m.tp / gemm_rate + memory_s * 2 / 3;
    const double attention_s = attention * tokens_mb / m.tp / gemm_rate * micro_batches;

    TimeEstimate t;
    double reduce_s = 0, gather_s = 0, per_micro_batch_s = 0, p2p_message_s = 0;
    for (size_t a = 0; a < kNumAxes; ++a) {
      const Axis axis = static_cast<Axis>(a);
      if (is_alias_axis(axis, m)) continue;
      const int group = m.size(axis);
      const LinkProfile& link = axis_link(axis, m, cluster);
      double axis_s = 0;
      for (size_t op = 0; op < kNumCommOps; ++op) {
        const OpVolume& v = comm.axes[a].ops[op];
        const double seconds = op_seconds(static_cast<CommOp>(op), v, group, link);
        axis_s += seconds;
        if (is_gradient_axis(axis)) (static_cast<CommOp>(op) == CommOp::all_gather ? gather_s : reduce_s) += seconds;
        if (axis == Axis::pp && static_cast<CommOp>(op) == CommOp::send && v.calls > 0) {
          p2p_message_s = link.latency_s + static_cast<double>(v.wire_bytes) / static_cast<double>(v.calls) / link.bytes_per_s;
        }
      }
      t.comm_s[a] = axis_s;
      if (axis == Axis::tp || axis == Axis::ep) per_micro_batch_s += axis_s / micro_batches;
      if (axis == Axis::cp) {
        // The ring passes K and V behind the attention of the chunk it holds; Ulysses'
        // all-to-alls are on the critical path.
        const bool hidden = config.cp_mode == CpMode::ring && device.overlaps_communication;
        per_micro_batch_s += (hidden ? std::max(0.0, axis_s - attention_s) : axis_s) / micro_batches;
      }
    }
    // The trainer's small collectives over the whole world, and the tied embedding's
    // gradient sum between the first and last pipeline stage: after the backward.
    double after_backward_s = 0;
    for (const auto& [volume, group, link] :
         {std::tuple<const AxisVolume&, int, const LinkProfile*>{comm.world, cluster.devices(),
                                                                  cluster.devices() <= cluster.devices_per_node
                                                                      ? &device.intra_node
                                                                      : &device.inter_node},
          {comm.tied_embedding, 2, &axis_link(Axis::pp, m, cluster)}}) {
      for (size_t op = 0; op < kNumCommOps; ++op) {
        after_backward_s += op_seconds(static_cast<CommOp>(op), volume.ops[op], group, *link);
      }
    }
    const double F = forward_s + per_micro_batch_s / 2, B = backward_s + per_micro_batch_s / 2;
    double pipeline_s = micro_batches * (F + B);
    if (facts) {
      t.bubble_s = pipeline_s * facts->bubble / (1 - facts->bubble) + 2.0 * (shape.chunks() - 1) * p2p_message_s;
      pipeline_s += t.bubble_s;
    }
    // Gradient reductions run behind the last micro-batch's backward; FSDP's gathers and
    // reduce-scatters behind all the compute (prefetch); ZeRO-1/2 gather the updated
    // parameters after the optimizer.
    double exposed_dp = 0;
    if (!device.overlaps_communication) {
      exposed_dp = reduce_s + gather_s;
    } else if (config.zero_stage == 3) {
      exposed_dp = std::max(0.0, reduce_s + gather_s - micro_batches * (F + B));
    } else {
      exposed_dp = std::max(0.0, reduce_s - B) + gather_s;
    }
    const TieredStates& tiers = model_states(resolved, m, stage, local_units);
    const double shard_params = static_cast<double>(tiers.disk.optimizer > 0 ? tiers.disk.optimizer : states.optimizer) / 8;
    t.optimizer_s = shard_params * (28.0 + (compute == DType::f32 ? 0 : dtype_size(compute))) / device.memory_bytes_per_s;
    t.compute_s = micro_batches * (forward_s + backward_s);
    t.exposed_comm_s = micro_batches * per_micro_batch_s + exposed_dp + after_backward_s;
    if (tiers.read_bytes + tiers.write_bytes > 0) {
      // The optimizer's stream runs behind its update, parameter reads behind forward and
      // backward (read ahead); what they do not cover, the step waits for.
      NDT_CHECK(device.disk_bytes_per_s > 0, "device profile \"{}\" has no disk bandwidth: offload is not planned on it",
                device.name);
      const double stream_s = static_cast<double>(tiers.stream_bytes) / device.disk_bytes_per_s;
      const double rest_s = static_cast<double>(tiers.read_bytes + tiers.write_bytes - tiers.stream_bytes) /
                            device.disk_bytes_per_s;
      t.offload_io_s = std::max(0.0, stream_s - t.optimizer_s) + std::max(0.0, rest_s - micro_batches * (F + B));
    }
    const double tail = exposed_dp + after_backward_s + t.optimizer_s + t.offload_io_s;
    t.step_s = pipeline_s + tail;
    slowest_stage = std::max(slowest_stage, pipeline_s);
    worst_tail = std::max(worst_tail, tail);
    if (static_cast<double>(mem.total()) > worst_memory) {
      worst_memory = static_cast<double>(mem.total());
      s.worst_stage = stage, s.memory = mem, s.time = t;
      for (size_t a = 0; a < kNumAxes; ++a) {
        s.comm[a] = {comm.axes[a].calls(), comm.axes[a].payload_bytes(), comm.axes[a].wire_bytes()};
      }
    }
  }
  // Stages wait for each other: the step is the slowest stage's pipeline plus the longest tail.
  s.time.step_s = slowest_stage + worst_tail;
  s.bubble = facts ? facts->bubble : 0.0;
  const double tokens = static_cast<double>(config.batch_size) * T;
  const double model_flops = std::accumulate(unit_flops.begin(), unit_flops.end(), 0.0) * tokens;
  const double hardware_flops = model_flops + std::accumulate(unit_recompute.begin(), unit_recompute.end(), 0.0) * tokens;
  const double capacity = s.time.step_s * cluster.devices() * peak;
  s.mfu = model_flops / capacity;
  s.hfu = hardware_flops / capacity;
  s.tokens_per_s = tokens / s.time.step_s;
  if (worst_memory > budget) s.rejected = overflow_message(s.memory, s.worst_stage, m.pp, budget);
  return s;
}

LayoutScore score_layout(const RunConfig& config, const Cluster& cluster) {
  return LayoutScorer(config).score(config, cluster);
}

PlanResult plan_layouts(const RunConfig& base, const Cluster& cluster, const PlanSpace& space) {
  const auto t0 = std::chrono::steady_clock::now();
  PlanResult result;
  const int D = cluster.devices();
  const int max_tp = space.max_tp > 0 ? space.max_tp : cluster.devices_per_node;
  const ModelConfig& model = base.model;
  model.validate();
  std::vector<Layout> candidates;
  // Offload is planned where the profile knows the disk; elsewhere only in memory.
  const std::vector<OffloadChoice> offloads =
      cluster.device.disk_bytes_per_s > 0 ? space.offloads : std::vector<OffloadChoice>{OffloadChoice::none};
  const std::vector<int> experts = model.is_moe() ? divisors(model.n_experts) : std::vector<int>{1};
  // The enumeration leaves out what ndtrain's checks refuse whatever the other settings:
  // more pipeline ranks than chunks the blocks fill, Ulysses where the heads on a tp rank
  // do not split over cp, and zb_h1 with recompute or a low-precision compute dtype.
  for (int pp : divisors(D)) {
    if (pp > model.n_layer + 1) continue;
    for (int tp : divisors(D / pp)) {
      if (tp > max_tp) continue;
      for (int cp : divisors(D / pp / tp)) {
        for (int dp_shard : divisors(D / pp / tp / cp)) {
          const int dp_replicate = D / pp / tp / cp / dp_shard;
          for (int ep : experts) {
            if ((dp_shard * cp) % ep != 0) continue;
            for (int zero : space.zero_stages) {
              if (zero == 0 && dp_shard > 1 && ep == 1) continue;
              for (bool sp : {false, true}) {
                if (sp && tp == 1) continue;
                for (CpMode cp_mode : space.cp_modes) {
                  if (cp == 1 && cp_mode != space.cp_modes.front()) continue;
                  if (cp_mode == CpMode::ulysses && (model.n_head % tp != 0 || model.kv_heads() % tp != 0 ||
                                               (model.n_head / tp) % cp != 0 || (model.kv_heads() / tp) % cp != 0)) {
                    continue;
                  }
                  for (int micro : space.micro_batch_sizes) {
                    for (CheckpointMode recompute : space.recompute) {
                      for (PipelineSchedule schedule : space.pp_schedules) {
                        if (pp == 1 && schedule != space.pp_schedules.front()) continue;
                        if (schedule == PipelineSchedule::zb_h1 && (recompute != CheckpointMode::none || base.precision.low())) continue;
                        for (OffloadChoice offload : offloads) {
                        // ZeRO without ranks to shard over is DDP, not a layout of its own, unless it
                        // offloads; offload needs ZeRO (the optimizer) or FSDP without replicas
                        // (parameters).
                        if (zero > 0 && dp_shard * cp == 1 && offload == OffloadChoice::none) continue;
                        if (offload != OffloadChoice::none && zero == 0) continue;
                        if (offload == OffloadChoice::params && (zero != 3 || dp_replicate > 1)) continue;
                        Layout l;
                        l.mesh = MeshShape{pp, dp_replicate, dp_shard, cp, tp, ep};
                        l.zero_stage = zero;
                        l.sequence_parallel = sp;
                        l.cp_mode = cp_mode;
                        l.micro_batch_size = micro;
                        l.recompute = recompute;
                        l.pp_schedule = pp == 1 ? base.pp_schedule : schedule;
                        l.pp_virtual_stages = pp > 1 && schedule == PipelineSchedule::interleaved_1f1b ? space.interleaved_stages : 1;
                        l.offload = offload;
                        candidates.push_back(std::move(l));
                        }
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  // Scored on every core, each thread with its own caches, every thread taking the next
  // candidate of its stride: the result is the same whatever the thread count.
  result.candidates = static_cast<int64_t>(candidates.size());
  result.layouts.resize(candidates.size());
  const int threads = std::max(1, std::min<int>(static_cast<int>(std::thread::hardware_concurrency()), 16));
  const auto score_some = [&](int first) {
    LayoutScorer scorer(base);
    for (size_t i = static_cast<size_t>(first); i < candidates.size(); i += static_cast<size_t>(threads)) {
      try {
        result.layouts[i] = scorer.score(candidates[i].apply(base), cluster);
      } catch (const Error& e) {
        LayoutScore& rejected = result.layouts[i];
        rejected.layout = candidates[i];
        rejected.invalid = true;
        rejected.rejected = e.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(score_some, t);
  score_some(0);
  for (std::thread& t : pool) t.join();
  for (const LayoutScore& s : result.layouts) ++(s.invalid ? result.invalid : s.rejected.empty() ? result.fitting : result.out_of_memory);
  NDT_CHECK(result.invalid < result.candidates,
            "no layout of {} devices can run this model and batch: each of the {} candidates is refused; the first: {}", D,
            result.candidates, result.layouts.empty() ? std::string("none") : result.layouts.front().rejected);
  std::stable_sort(result.layouts.begin(), result.layouts.end(), [](const LayoutScore& a, const LayoutScore& b) {
    const int ra = a.rejected.empty() ? 0 : a.invalid ? 2 : 1, rb = b.rejected.empty() ? 0 : b.invalid ? 2 : 1;
    if (ra != rb) return ra < rb;
    if (ra == 0) return a.time.step_s < b.time.step_s;
    if (ra == 1) return a.memory.total() < b.memory.total();
    return false;
  });
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

nlohmann::json layout_json(const LayoutScore& s) {
  nlohmann::json j = {{"layout", s.layout.describe()},
                      {"pp", s.layout.mesh.pp},
                      {"dp_replicate", s.layout.mesh.dp_replicate},
                      {"dp_shard", s.layout.mesh.dp_shard},
                      {"cp", s.layout.mesh.cp},
                      {"tp", s.layout.mesh.tp},
                      {"ep", s.layout.mesh.ep},
                      {"zero_stage", s.layout.zero_stage},
                      {"sequence_parallel", s.layout.sequence_parallel},
                      {"cp_mode", cp_mode_name(s.layout.cp_mode)},
                      {"micro_batch_size", s.layout.micro_batch_size},
                      {"activation_checkpointing", checkpoint_mode_name(s.layout.recompute)},
                      {"pp_schedule", pipeline_schedule_name(s.layout.pp_schedule)},
                      {"pp_virtual_stages", s.layout.pp_virtual_stages},
                      {"offload", offload_choice_name(s.layout.offload)},
                      {"fits", s.rejected.empty()}};
  if (!s.rejected.empty()) j["rejected"] = s.rejected;
  if (s.invalid) return j;
  j["memory_bytes"] = {{"params", s.memory.params},       {"grads", s.memory.grads},
                       {"optimizer", s.memory.optimizer}, {"activations", s.memory.activations},
                       {"comm_buffers", s.memory.comm_buffers}, {"total", s.memory.total()},
                       {"in_flight_micro_batches", s.memory.in_flight}, {"pp_stage", s.worst_stage},
                       {"disk", s.memory.disk}};
  nlohmann::json comm = nlohmann::json::object();
  for (size_t a = 0; a < kNumAxes; ++a) {
    const OpVolume& v = s.comm[a];
    if (v.calls == 0 || is_alias_axis(static_cast<Axis>(a), s.layout.mesh)) continue;
    comm[std::string(axis_name(static_cast<Axis>(a)))] = {
        {"calls", v.calls}, {"payload_bytes", v.payload_bytes}, {"wire_bytes", v.wire_bytes},
        {"seconds", s.time.comm_s[a]}};
  }
  j["comm_per_step"] = comm;
  j["time_s"] = {{"step", s.time.step_s},         {"compute", s.time.compute_s}, {"exposed_comm", s.time.exposed_comm_s},
                 {"bubble", s.time.bubble_s},     {"optimizer", s.time.optimizer_s},
                 {"offload_io", s.time.offload_io_s}};
  j["bubble_fraction"] = s.bubble;
  j["mfu"] = s.mfu;
  j["hfu"] = s.hfu;
  j["tokens_per_s"] = s.tokens_per_s;
  return j;
}

std::string plan_csv(const PlanResult& result) {
  std::string out =
      "layout,pp,dp_replicate,dp_shard,cp,tp,ep,zero_stage,sequence_parallel,cp_mode,micro_batch_size,"
      "activation_checkpointing,pp_schedule,pp_virtual_stages,offload,fits,memory_gib,params_gib,grads_gib,optimizer_gib,"
      "activations_gib,comm_buffers_gib,disk_gib,step_s,compute_s,exposed_comm_s,bubble_s,offload_io_s,mfu,hfu,tokens_per_s,"
      "rejected\n";
  const auto quoted = [](std::string text) {
    std::string q = "\"";
    for (char ch : text) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
  };
  for (const LayoutScore& s : result.layouts) {
    const MemoryEstimate& m = s.memory;
    out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},", quoted(s.layout.describe()), s.layout.mesh.pp,
                       s.layout.mesh.dp_replicate, s.layout.mesh.dp_shard, s.layout.mesh.cp, s.layout.mesh.tp, s.layout.mesh.ep, s.layout.zero_stage,
                       s.layout.sequence_parallel, cp_mode_name(s.layout.cp_mode), s.layout.micro_batch_size,
                       checkpoint_mode_name(s.layout.recompute), pipeline_schedule_name(s.layout.pp_schedule),
                       s.layout.pp_virtual_stages, offload_choice_name(s.layout.offload), s.rejected.empty());
    if (s.invalid) {
      out += fmt::format(",,,,,,,,,,,,,,,{}\n", quoted(s.rejected));
      continue;
    }
    out += fmt::format("{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.4f},{:.4f},"
                       "{:.6g},{}\n",
                       m.total() / kGiB, m.params / kGiB, m.grads / kGiB, m.optimizer / kGiB, m.activations / kGiB,
                       m.comm_buffers / kGiB, m.disk / kGiB, s.time.step_s, s.time.compute_s, s.time.exposed_comm_s,
                       s.time.bubble_s, s.time.offload_io_s, s.mfu, s.hfu, s.tokens_per_s, quoted(s.rejected));
  }
  return out;
}

std::string render_plan_table(const PlanResult& result, const Cluster& cluster, int rows) {
  std::string out = fmt::format(
      "{} candidate layouts on {} x {} {} ({} devices, {} each): {} fit, {} out of memory, {} refused by ndtrain's "
      "checks; searched in {:.2f} s\n",
      result.candidates, cluster.nodes, cluster.devices_per_node, cluster.device.name, cluster.devices(),
      gib(cluster.device.memory_bytes), result.fitting, result.out_of_memory, result.invalid, result.seconds);
  if (result.fitting > 0) {
    out += fmt::format("\n{:<4} {:<72} {:>9} {:>9} {:>6} {:>6} {:>7} {:>10} {:>10}\n", "rank", "layout", "memory",
                       "step", "MFU", "HFU", "bubble", "exposed", "tokens/s");
    int shown = 0;
    for (const LayoutScore& s : result.layouts) {
      if (!s.rejected.empty() || shown >= rows) break;
      ++shown;
      out += fmt::format("{:<4} {:<72} {:>9} {:>8.3g}s {:>5.1f}% {:>5.1f}% {:>6.1f}% {:>9.3g}s {:>10.4g}\n", shown,
                         s.layout.describe(), memory_text(static_cast<double>(s.memory.total())), s.time.step_s, 100 * s.mfu,
                         100 * s.hfu, 100 * s.bubble, s.time.exposed_comm_s, s.tokens_per_s);
    }
  } else {
    out += "\nno layout fits in memory.\n";
  }
  // The rejections: the layout that came closest to fitting, and the commonest reasons.
  for (const LayoutScore& s : result.layouts) {
    if (!s.rejected.empty() && !s.invalid) {
      out += fmt::format("\nclosest to fitting of those out of memory: {}\n  {}\n", s.layout.describe(), s.rejected);
      break;
    }
  }
  std::map<std::string, int64_t> reasons;
  for (const LayoutScore& s : result.layouts) {
    if (!s.invalid) continue;
    // Group by the message with its numbers left out.
    std::string key;
    for (char ch : s.rejected) {
      if (!std::isdigit(static_cast<unsigned char>(ch))) key += ch;
      else if (key.empty() || key.back() != '#') key += '#';
    }
    reasons[key] += 1;
  }
  std::vector<std::pair<int64_t, std::string>> common;
  for (const auto& [key, n] : reasons) common.emplace_back(n, key);
  std::sort(common.rbegin(), common.rend());
  if (!common.empty()) out += "\nrefused by ndtrain's checks (# stands for numbers), commonest first:\n";
  for (size_t i = 0; i < std::min<size_t>(common.size(), 6); ++i) {
    out += fmt::format("  {:>7} x {}\n", common[i].first, common[i].second);
  }
  return out;
}

}  // namespace ndt
