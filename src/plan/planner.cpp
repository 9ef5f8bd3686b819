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
#include "plan/comm_time.h"
#include "plan/compute_time.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <thread>
#include <tuple>
#include <utility>

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

bool is_gradient_axis(Axis a) {
  return a == Axis::dp_replicate || a == Axis::dp_shard || a == Axis::dp || a == Axis::dp_shard_cp ||
         a == Axis::dp_cp || a == Axis::edp || a == Axis::edp_shard;
}

// The schedule's bubble and live activations at the textbook costs (backward twice the
// forward), per (schedule, pp, v, m): the planner's layouts share a few shapes.
struct PipelineFacts {
  double bubble = 0;
  std::vector<int> contexts;  // per rank: micro-batch contexts held at once
  std::vector<int> deferred;  // per rank: weight halves pending at once (peak_deferred_weight_halves)
};

const PipelineFacts& pipeline_facts(PipelineSchedule schedule, const PipelineShape& shape) {
  thread_local std::map<std::tuple<int, int, int, int>, PipelineFacts> cache;
  const auto key = std::make_tuple(static_cast<int>(schedule), shape.pp, shape.v, shape.m);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const PipelineSimulation s = simulate_pipeline(schedule, shape);
  PipelineFacts facts{s.mean_bubble, s.peak_live_contexts, {}};
  for (int r = 0; r < shape.pp; ++r) {
    facts.deferred.push_back(peak_deferred_weight_halves(pipeline_actions(schedule, shape, r)));
  }
  return cache.emplace(key, std::move(facts)).first->second;
}

// The chunks per pp rank and their placement (a V or a loop) as one number, for the
// keys of what depends on which units a stage holds.
int chunk_arrangement(const RunConfig& c) {
  return c.pp_virtual_stages * 2 + (pipeline_placement(c.pp_schedule) == PipelinePlacement::v ? 1 : 0);
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
  if (axis == Axis::cp_ring && m.cp_ulysses == 1) return true;
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
  if (mesh.cp_ulysses > 1) axes += fmt::format(" (ulysses {} x ring {})", mesh.cp_ulysses, mesh.cp / mesh.cp_ulysses);
  const std::string sharding = zero_stage == 3 ? "fsdp" : zero_stage > 0 ? fmt::format("zero{}", zero_stage) : "ddp";
  std::string pipeline;
  if (mesh.pp > 1) {
    pipeline = fmt::format(" | {}{}", pipeline_schedule_name(pp_schedule),
                           pp_virtual_stages > 1 ? fmt::format(" v{}", pp_virtual_stages) : "");
  }
  return fmt::format("{} | {} | mb{} | {}{}{}", axes, sharding, micro_batch_size, checkpoint_mode_name(recompute),
                     pipeline, offload == OffloadChoice::none ? "" : fmt::format(" | offload {}", offload_choice_name(offload)));
}

namespace {

// One layout being scored: its resolved run and what its stages share.
struct Candidate {
  const RunConfig& config;
  const Cluster& cluster;
  RunConfig resolved;
  MeshShape m{};
  ActivationLayout layout{};
  PipelineShape shape{};
  const PipelineFacts* facts = nullptr;
  const PipelineStages* split = nullptr;
  double gemm_rate = 0;
  double tokens_mb = 0;  // tokens of one micro-batch on one rank (tp ranks split the matmuls' FLOPs)
  std::vector<std::vector<char>> stage_units{};  // per stage: the units it runs (empty: all)
  std::vector<int64_t> contexts{};             // per stage: one micro-batch's activation bytes
};

// One micro-batch through a stage (roofline): the matmuls at the GEMM rate, and the
// activations written in forward and read and written again in backward at the memory
// bandwidth. The same micro-batch's forward + backward by the kernels' classes: the
// matmuls (with recompute's), the attention core (what the ring's transfers hide
// behind), and the memory traffic with ZeRO/FSDP's copies.
struct StageCompute {
  double forward_s = 0, backward_s = 0;
  double matmul_s = 0, attention_s = 0, memory_s = 0;
  double per_step_s = 0;  // per step: ZeRO-1/2's copies that are not per micro-batch (ShardingCopies)
};

// A stage's communication in one step, by where it lands in the step.
struct CommSeconds {
  double reduce_s = 0, gather_s = 0;  // data-parallel gradient reductions and parameter gathers
  double per_micro_batch_s = 0;       // tp, ep and the exposed cp of each micro-batch
  double p2p_message_s = 0;           // one pipeline boundary message
  double after_backward_s = 0;        // the world's small collectives and the tied embedding's sum
};

// A stage's step: its pipeline (micro-batches and bubble) and the tail after it.
struct StageTime {
  TimeEstimate t;
  double pipeline_s = 0, tail_s = 0;
};

// The trainer's small collectives over the whole world, and the tied embedding's
// gradient sum between the first and last pipeline stage: after the backward.
double after_backward_seconds(const Candidate& c, const StepCommunication& comm) {
  const Cluster& cluster = c.cluster;
  const LinkProfile& world_link =
      cluster.devices() <= cluster.devices_per_node ? cluster.device.intra_node : cluster.device.inter_node;
  const LinkProfile tied_link = axis_link(Axis::pp, c.m, cluster);
  const bool tied_inside = !axis_placement(Axis::pp, c.m, cluster).crosses_nodes;
  double seconds = 0;
  for (size_t op = 0; op < kNumCommOps; ++op) {
    seconds += group_op_seconds(static_cast<CommOp>(op), comm.world.ops[op], cluster.devices(), cluster.nodes == 1,
                                world_link, cluster.device);
    seconds += group_op_seconds(static_cast<CommOp>(op), comm.tied_embedding.ops[op], 2, tied_inside, tied_link,
                                cluster.device);
  }
  return seconds;
}

// Each axis's collectives at their time (into t.comm_s), sorted by where the step waits for them.
CommSeconds communication_seconds(const Candidate& c, const StepCommunication& comm, double attention_s,
                                  TimeEstimate& t) {
  const MeshShape& m = c.m;
  const int micro_batches = c.resolved.micro_batches();
  CommSeconds s;
  for (size_t a = 0; a < kNumAxes; ++a) {
    const Axis axis = static_cast<Axis>(a);
    if (is_alias_axis(axis, m)) continue;
    const LinkProfile link = axis_link(axis, m, c.cluster);
    double axis_s = 0;
    for (size_t op = 0; op < kNumCommOps; ++op) {
      const CommOp kind = static_cast<CommOp>(op);
      const OpVolume& v = comm.axes[a].ops[op];
      const double seconds = kind == CommOp::all_reduce ? all_reduce_seconds(c.config, axis, v, m, c.cluster)
                                                        : axis_op_seconds(kind, v, axis, m, c.cluster);
      axis_s += seconds;
      if (is_gradient_axis(axis)) (kind == CommOp::all_gather ? s.gather_s : s.reduce_s) += seconds;
      if (axis == Axis::pp && kind == CommOp::send && v.calls > 0) {
        s.p2p_message_s = link.latency_s + link.call_s +
                          static_cast<double>(v.wire_bytes) / static_cast<double>(v.calls) / link.bytes_per_s;
      }
    }
    t.comm_s[a] = axis_s;
    if (axis == Axis::tp || axis == Axis::ep) s.per_micro_batch_s += axis_s / micro_batches;
    if (axis == Axis::cp || axis == Axis::cp_ulysses || axis == Axis::cp_ring) {
      // The ring (USP's on cp_ring) passes K and V behind the attention of the chunk it
      // holds; Ulysses' all-to-alls (USP's on cp_ulysses) are on the critical path.
      const bool ring = axis == Axis::cp_ring || (axis == Axis::cp && c.config.cp_mode == CpMode::ring);
      const bool hidden = ring && c.cluster.device.overlaps_communication;
      s.per_micro_batch_s += (hidden ? std::max(0.0, axis_s - attention_s) : axis_s) / micro_batches;
    }
  }
  s.after_backward_s = after_backward_seconds(c, comm);
  return s;
}

// Gradient reductions run behind the last micro-batch's backward; FSDP's gathers and
// reduce-scatters behind all the compute (prefetch); ZeRO-1/2 gather the updated
// parameters after the optimizer. Without overlap the step waits for all of it.
double exposed_data_parallel_seconds(const Candidate& c, const CommSeconds& s, double compute_s, double last_backward_s) {
  if (!c.cluster.device.overlaps_communication) return s.reduce_s + s.gather_s;
  if (c.config.zero_stage == 3) return std::max(0.0, s.reduce_s + s.gather_s - compute_s);
  return std::max(0.0, s.reduce_s - last_backward_s) + s.gather_s;
}

// The optimizer's kernels over the rank's shard (the profile's optimizer class): AdamW's
// 28 bytes of fp32 state read and written per parameter, the gradient norm's read of the
// gradient, and the compute copy written when it is not fp32, at the optimizer's measured
// rate where the device gives one.
double optimizer_seconds(const TieredStates& tiers, DType compute, const DeviceProfile& device) {
  const double shard_params =
      static_cast<double>(tiers.disk.optimizer > 0 ? tiers.disk.optimizer : tiers.resident.optimizer) / 8;
  const double rate = device.optimizer_bytes_per_s > 0 ? device.optimizer_bytes_per_s : device.memory_bytes_per_s;
  return shard_params * (32.0 + (compute == DType::f32 ? 0 : dtype_size(compute))) / rate;
}

// The optimizer's stream runs behind its update, parameter reads behind forward and
// backward (read ahead); what they do not cover, the step waits for.
double offload_io_seconds(const TieredStates& tiers, const DeviceProfile& device, double optimizer_s, double compute_s) {
  if (tiers.read_bytes + tiers.write_bytes == 0) return 0;
  NDT_CHECK(device.disk_bytes_per_s > 0, "device profile \"{}\" has no disk bandwidth: offload is not planned on it",
            device.name);
  const double stream_s = static_cast<double>(tiers.stream_bytes) / device.disk_bytes_per_s;
  const double rest_s =
      static_cast<double>(tiers.read_bytes + tiers.write_bytes - tiers.stream_bytes) / device.disk_bytes_per_s;
  return std::max(0.0, stream_s - optimizer_s) + std::max(0.0, rest_s - compute_s);
}

// A pipeline stage's kind: whether it is the first or the last, and its units in order
// (E embedding, D dense block, M MoE block, H head, | a gap). Stages of one kind
// communicate alike.
std::string stage_kind(const std::vector<char>& units, int stage, int pp, const ModelConfig& model) {
  std::string kind = {stage == 0 ? 'F' : '-', stage == pp - 1 ? 'L' : '-', ':'};
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    if (!units[static_cast<size_t>(u)]) {
      if (!kind.empty() && kind.back() != '|') kind += '|';
      continue;
    }
    kind += u == 0 ? 'E' : u == model.n_layer + 1 ? 'H' : model.is_moe_block(u - 1) ? 'M' : 'D';
  }
  return kind;
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
        unit_flops_(unit_flops_per_token(base.model, base.seq_len)),
        unit_expert_flops_(unit_expert_flops_per_token(base.model)) {}

  LayoutScore score(const RunConfig& config, const Cluster& cluster);

 private:
  Candidate candidate(const RunConfig& config, const Cluster& cluster);
  MemoryEstimate stage_memory(Candidate& c, int stage);  // fills c's stage units and context
  StageCompute stage_compute(const Candidate& c, int stage);
  // One fp32 copy of the stage's unsharded parameters on this rank (ZeRO 1-3; 0 under DDP).
  double parameter_copy_seconds(const Candidate& c, int stage);
  StageTime stage_time(const Candidate& c, int stage, const StepCommunication& comm);
  // Each stage's communication and time into s; the score keeps the stage with the most
  // memory. Returns that memory (communication buffers now counted).
  double time_stages(const Candidate& c, LayoutScore& s);
  void set_throughput(const Candidate& c, LayoutScore& s);  // bubble, MFU, HFU, tokens/s

  // Per unit, as Transformer::recompute_flops_per_token counts them for the trainer.
  const std::vector<double>& recompute_flops(const Candidate& c) {
    const RunConfig& config = c.config;
    const bool scores = recomputes_attention_scores(c.m.cp > 1, config.precision.compute);
    const auto key = std::make_tuple(static_cast<int>(config.activation_checkpointing.mode),
                                     config.activation_checkpointing.every, scores);
    auto it = recompute_.find(key);
    if (it == recompute_.end()) {
      it = recompute_
               .emplace(key, unit_recompute_flops_per_token(model_, config.seq_len, config.activation_checkpointing, scores))
               .first;
    }
    return it->second;
  }
  const PipelineStages& stages(const RunConfig& c, int chunks) {
    auto it = stages_.find(chunks);
    if (it == stages_.end()) it = stages_.emplace(chunks, partition_pipeline(model_, c.seq_len, chunks)).first;
    return it->second;
  }
  const std::vector<char>& stage_local_units(const RunConfig& c, const PipelineShape& shape, int stage,
                                            const PipelineStages& split) {
    const auto key = std::make_tuple(shape.pp, chunk_arrangement(c), stage);
    auto it = local_units_.find(key);
    if (it == local_units_.end()) it = local_units_.emplace(key, split.local_units(stage, shape)).first;
    return it->second;
  }
  // One tp rank's parameter specs of pipeline rank `stage` (pp = 1: the whole model);
  // arrangement: chunk_arrangement.
  const std::vector<ParameterSpec>& stage_specs(int tp, int pp, int arrangement, int stage,
                                                const std::vector<char>& local_units) {
    const auto key = std::make_tuple(tp, pp, arrangement, stage);
    auto it = stage_specs_.find(key);
    if (it != stage_specs_.end()) return it->second;
    std::vector<ParameterSpec> specs;
    for (const ParameterSpec& spec : specs_) {
      if (local_units.empty() || local_units[static_cast<size_t>(spec.unit)]) specs.push_back(spec);
    }
    // A tied output layer's weight lives on the first and the last stage (one rank under
    // the V placement: no copy).
    const bool head = !local_units.empty() && local_units.back() && !local_units.front();
    if (model_.tied_embeddings && head) specs.push_back(specs_.front());
    return stage_specs_.emplace(key, local_parameter_specs(std::move(specs), tp)).first->second;
  }

  // predict_model_states and Transformer::predict_activation_bytes of a stage, remembered:
  // layouts differing only in other axes share them.
  // Offloaded: each state's resident peak (the offload model's), with what is on disk and moved.
  TieredStates model_states(const RunConfig& c, const MeshShape& m, int stage, const std::vector<char>& local_units) {
    const int offload = c.offload_params ? 2 : c.offload_optimizer ? 1 : 0;
    const auto key = std::make_tuple(m.tp, m.pp * 64 + offload, chunk_arrangement(c) * 4096 + c.micro_batches(), stage,
                                     m.size(Axis::dp_shard_cp), c.zero_stage, static_cast<int>(c.precision.compute), m.ep);
    auto it = states_.find(key);
    if (it == states_.end()) {
      const std::vector<ParameterSpec>& specs = stage_specs(m.tp, m.pp, chunk_arrangement(c), stage, local_units);
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
                                     static_cast<int>(policy.mode), policy.every, m.pp * 1000 + chunk_arrangement(c),
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
  std::vector<double> unit_expert_flops_;
  std::map<std::tuple<int, int, bool>, std::vector<double>> recompute_;
  std::map<int, PipelineStages> stages_;
  std::map<std::tuple<int, int, int>, std::vector<char>> local_units_;
  std::map<std::tuple<int, int, int, int>, std::vector<ParameterSpec>> stage_specs_;
};

Candidate LayoutScorer::candidate(const RunConfig& config, const Cluster& cluster) {
  // What the caches were filled for.
  NDT_CHECK(config.seq_len == seq_len_ && config.loss_chunk_rows == loss_chunk_rows_ &&
                config.model.n_layer == model_.n_layer && config.model.d_model == model_.d_model,
            "LayoutScorer: a config of another model or run");
  config.validate_layout();
  Candidate c{config, cluster,
              config.resolved(RunConfig::JobShape{cluster.devices(), cluster.devices_per_node, cluster.devices_per_node})};
  c.m = c.resolved.mesh;
  c.layout.tp = c.m.tp;
  c.layout.sequence_parallel = config.sequence_parallel;
  c.layout.cp = CpLayout{c.m.cp, config.cp_mode, config.cp_chunks, c.m.cp_ulysses};
  c.shape = pipeline_shape(config.pp_schedule, c.m.pp, config.pp_virtual_stages, c.resolved.micro_batches());
  if (c.m.pp > 1) {
    NDT_CHECK(config.pp_layers.empty(), "the planner balances pipeline stages itself: parallel.pp_layers = \"{}\"",
              config.pp_layers);
    // Its units hold 1/k of a micro-batch's activations, which the stage memory below
    // does not model yet (it would count each as a whole micro-batch).
    NDT_CHECK(config.pp_schedule != PipelineSchedule::seq1f1b,
              "the planner does not model parallel.pp_schedule = \"seq1f1b\" (parallel.pp_seq_chunks = {}) yet",
              config.pp_seq_chunks);
    c.facts = &pipeline_facts(config.pp_schedule, c.shape);
    c.split = &stages(config, c.m.pp * config.pp_virtual_stages);
  }
  const DeviceProfile& device = cluster.device;
  c.gemm_rate = device.peak_flops(config.precision.compute, config.precision.fp8) * device.gemm_efficiency;
  c.tokens_mb = static_cast<double>(c.resolved.micro_batch_size) * config.seq_len / c.m.cp;
  c.stage_units.resize(static_cast<size_t>(c.m.pp));
  c.contexts.resize(static_cast<size_t>(c.m.pp));
  return c;
}

MemoryEstimate LayoutScorer::stage_memory(Candidate& c, int stage) {
  const RunConfig& config = c.config;
  std::vector<char>& local_units = c.stage_units[static_cast<size_t>(stage)];
  if (c.split) local_units = stage_local_units(config, c.shape, stage, *c.split);
  MemoryEstimate mem;
  const TieredStates tiers = model_states(c.resolved, c.m, stage, local_units);
  mem.params = tiers.resident.params, mem.grads = tiers.resident.grads, mem.optimizer = tiers.resident.optimizer;
  mem.disk = tiers.disk.total();
  const int mb = c.resolved.micro_batch_size;
  const int64_t one_context = activation_bytes(config, c.layout, mb, c.m, stage, local_units, config.activation_checkpointing);
  c.contexts[static_cast<size_t>(stage)] = one_context;
  // A context per micro-batch in flight (all of the rank's chunks: one context serves
  // a micro-batch from its first chunk's forward to its last chunk's backward), and one
  // workspace they share.
  mem.in_flight = c.facts ? c.facts->contexts[static_cast<size_t>(stage)] : 1;
  const int64_t workspace = workspace_floats(config.model, c.layout, mb, config.seq_len / c.m.cp, config.loss_chunk_rows,
                                             config.activation_checkpointing, config.precision.compute) * 4;
  mem.activations = mem.in_flight * (one_context - workspace) + workspace;
  // Split backward: the pending weight halves' copies, each of one chunk of the stage.
  const int deferred = c.facts ? c.facts->deferred[static_cast<size_t>(stage)] : 0;
  if (deferred > 0) {
    mem.activations += deferred * deferred_weight_bytes(config.model, c.layout, mb, config.seq_len / c.m.cp,
                                                        config.activation_checkpointing, local_units,
                                                        config.precision.compute) /
                       config.pp_virtual_stages;
  }
  return mem;
}

// The copies that ZeRO-1, ZeRO-2 and FSDP make around their collectives, in fp32 copies
// of the rank's unsharded stage parameters; the collectives' own time is in the
// communication model. ZeRO-2 and FSDP (both run by parallel/data/fsdp.cpp), per
// micro-batch: backward zeroes each group's gradients (a memset: half a copy) and packs
// them for the reduce-scatter (one); FSDP also unpacks each gathered group into its
// parameters in forward and again in backward (one each). Per step: ZeRO-2 unpacks the
// gathered updated parameters after the update (one); ZeRO-1 (zero_stage1.cpp) packs the
// gradients for its reduce-scatter once, at the synchronising micro-batch, and unpacks
// the gathered updated rows after the update (two). Profiled on the development VM (gpt2
// 8x256, 2 ranks, 0.13-0.17 s steps, one copy of its 25.8 MB at the calibrated 5.9 GB/s
// about 4.4 ms): the elementwise kernels took 0.013-0.016 s (FSDP), 0.010-0.011 s (ZeRO-2)
// and 0.008-0.010 s (ZeRO-1) more than DDP's (docs/planner.md).
struct ShardingCopies {
  double forward = 0, backward = 0;  // per micro-batch
  double per_step = 0;               // counted with the optimizer
};

ShardingCopies sharding_copies(int zero_stage) {
  if (zero_stage == 3) return {1, 2.5, 0};
  if (zero_stage == 2) return {0, 1.5, 1};
  if (zero_stage == 1) return {0, 0, 2};
  return {};
}

double LayoutScorer::parameter_copy_seconds(const Candidate& c, int stage) {
  if (c.config.zero_stage < 1) return 0;
  const std::vector<ParameterSpec>& specs = stage_specs(c.m.tp, c.m.pp, chunk_arrangement(c.config), stage,
                                                        c.stage_units[static_cast<size_t>(stage)]);
  // The rank's unsharded fp32 parameters (its tp block of each, its 1/ep of the experts):
  // the memory model's stage-0 parameter bytes.
  const int64_t bytes = predict_model_states(specs, /*dp_shard=*/1, /*zero_stage=*/0, DType::f32, c.m.ep).params;
  return static_cast<double>(bytes) / c.cluster.device.memory_bytes_per_s;
}

StageCompute LayoutScorer::stage_compute(const Candidate& c, int stage) {
  const RunConfig& config = c.config;
  const DeviceProfile& device = c.cluster.device;
  const std::vector<char>& local_units = c.stage_units[static_cast<size_t>(stage)];
  const std::vector<double>& unit_recompute = recompute_flops(c);
  double flops = 0, recompute = 0, attention = 0, experts = 0;
  for (int u = 0; u < static_cast<int>(unit_flops_.size()); ++u) {
    if (!local_units.empty() && !local_units[static_cast<size_t>(u)]) continue;
    flops += unit_flops_[static_cast<size_t>(u)];
    experts += unit_expert_flops_[static_cast<size_t>(u)];
    recompute += unit_recompute[static_cast<size_t>(u)];
    if (u >= 1 && u <= model_.n_layer) attention += 12.0 * model_.d_model * static_cast<double>(config.seq_len);
  }
  const int64_t traffic = config.activation_checkpointing.mode == CheckpointMode::none
                              ? c.contexts[static_cast<size_t>(stage)]
                              : activation_bytes(config, c.layout, c.resolved.micro_batch_size, c.m, stage, local_units, {});
  // Under ep the experts' matmuls run at the pace of the group's most loaded rank: the
  // cluster's expert_load times the balanced rows (each local expert's GEMM gets the ep
  // group's rows for it).
  const double load = c.m.ep > 1 ? c.cluster.expert_load : 1.0;
  int moe_blocks = 0;
  for (int layer = 0; layer < model_.n_layer; ++layer) {
    moe_blocks += model_.is_moe_block(layer) && (local_units.empty() || local_units[static_cast<size_t>(layer + 1)]);
  }
  const double memory_s =
      (3.0 * static_cast<double>(traffic) + moe_blocks * moe_dispatch_bytes(model_, c.m, c.tokens_mb, load)) /
      elementwise_rate(device);
  const double expert_rows = c.tokens_mb * model_.moe_top_k * c.m.ep * load / std::max(model_.n_experts, 1);
  // The matmuls at the efficiency of their shapes (plan/compute_time.h), the attention
  // core at its own rate.
  const double gemm_rate =
      device.gemm_efficiency_by_size.empty()
          ? c.gemm_rate
          : device.peak_flops(config.precision.compute, config.precision.fp8) *
                stage_gemm_efficiency(device, model_,
                                      stage_specs(c.m.tp, c.m.pp, chunk_arrangement(config), stage, local_units),
                                      c.tokens_mb, expert_rows);
  // One attention call's queries: the whole sequence, or a ring rank's block of it.
  const int ring = config.cp_mode == CpMode::ulysses ? 1 : c.m.size(Axis::cp_ring);
  const double per_flop = 1.0 / gemm_rate,
               attention_per_flop = 1.0 / attention_rate(device, c.gemm_rate, config.seq_len / static_cast<double>(ring));
  const double tokens = c.tokens_mb / c.m.tp, matmul = flops - attention + (load - 1) * experts;
  const ShardingCopies copies = sharding_copies(config.zero_stage);
  const double copy_s = parameter_copy_seconds(c, stage);
  StageCompute s;
  s.per_step_s = copies.per_step * copy_s;
  s.forward_s =
      (matmul * per_flop + attention * attention_per_flop) / 3 * tokens + memory_s / 3 + copies.forward * copy_s;
  s.backward_s = ((matmul * per_flop + attention * attention_per_flop) * 2 / 3 + recompute * per_flop) * tokens +
                 memory_s * 2 / 3 + copies.backward * copy_s;
  s.matmul_s = (matmul + recompute) * per_flop * tokens;
  s.attention_s = attention * attention_per_flop * tokens;
  s.memory_s = memory_s + (copies.forward + copies.backward) * copy_s;
  return s;
}

StageTime LayoutScorer::stage_time(const Candidate& c, int stage, const StepCommunication& comm) {
  const DeviceProfile& device = c.cluster.device;
  const int micro_batches = c.resolved.micro_batches();
  const StageCompute compute = stage_compute(c, stage);
  StageTime st;
  TimeEstimate& t = st.t;
  const CommSeconds comm_s = communication_seconds(c, comm, micro_batches * compute.attention_s, t);
  const double F = compute.forward_s + comm_s.per_micro_batch_s / 2, B = compute.backward_s + comm_s.per_micro_batch_s / 2;
  st.pipeline_s = micro_batches * (F + B);
  if (c.facts) {
    t.bubble_s = st.pipeline_s * c.facts->bubble / (1 - c.facts->bubble) +
                 2.0 * (c.shape.chunks() - 1) * comm_s.p2p_message_s;
    st.pipeline_s += t.bubble_s;
  }
  const double exposed_dp = exposed_data_parallel_seconds(c, comm_s, micro_batches * (F + B), B);
  const TieredStates tiers = model_states(c.resolved, c.m, stage, c.stage_units[static_cast<size_t>(stage)]);
  // ZeRO-1/2's copies once a step (the unpack of the updated parameters follows the
  // update; ZeRO-1's gradient pack precedes its reduce-scatter): counted with the update.
  t.optimizer_s = optimizer_seconds(tiers, c.config.precision.compute, device) + compute.per_step_s;
  t.compute_s = micro_batches * (compute.forward_s + compute.backward_s);
  t.matmul_s = micro_batches * compute.matmul_s;
  t.attention_s = micro_batches * compute.attention_s;
  t.memory_s = micro_batches * compute.memory_s;
  t.step_copies_s = compute.per_step_s;
  t.exposed_comm_s = micro_batches * comm_s.per_micro_batch_s + exposed_dp + comm_s.after_backward_s;
  t.offload_io_s = offload_io_seconds(tiers, device, t.optimizer_s, micro_batches * (F + B));
  st.tail_s = exposed_dp + comm_s.after_backward_s + t.optimizer_s + t.offload_io_s;
  t.step_s = st.pipeline_s + st.tail_s;
  return st;
}

// The step of ranks that share cores (DeviceProfile::oversubscription above 1), given the
// model's `step` and the stages' mean `busy` time (the step less the bubble, at the
// calibrated rates, which are those of every rank computing at once). A rank waiting in
// the pipeline's bubble (or behind a slower stage) yields its core to the ranks of other
// stages, so the step is the larger of the node's work over its cores (`busy`) and the
// path at a whole core each (`step` over the oversubscription), never more than `step`.
// On this 2-core VM, pp x ddp on 4 ranks stepped at 0.116-0.129 s where the bubble's
// 0.032 s took the prediction to 0.166 s (docs/planner.md). One node only: where pp spans
// nodes, a node's ranks are in the same stages and idle in their bubble together.
double shared_core_step(const Candidate& c, double step, double busy) {
  const double oversubscription = c.cluster.device.oversubscription;
  if (oversubscription <= 1 || c.cluster.nodes > 1) return step;
  return std::min(step, std::max(busy, step / oversubscription));
}

double LayoutScorer::time_stages(const Candidate& c, LayoutScore& s) {
  // Stages holding the same kinds of units in the same places of the pipeline communicate
  // alike: the communication model runs once per kind.
  std::map<std::string, std::pair<StepCommunication, int64_t>> by_kind;
  double worst_memory = -1, slowest_stage = 0, worst_tail = 0, busy = 0;
  for (int stage = 0; stage < c.m.pp; ++stage) {
    MemoryEstimate& mem = s.stages[static_cast<size_t>(stage)];
    const std::string kind =
        c.m.pp > 1 ? stage_kind(c.stage_units[static_cast<size_t>(stage)], stage, c.m.pp, c.config.model) : "";
    auto known = by_kind.find(kind);
    if (known == by_kind.end()) {
      const int devices = c.cluster.devices();
      known = by_kind
                  .emplace(kind, std::pair{predict_step_communication(c.config, devices, stage, c.split),
                                           predict_comm_buffer_bytes(c.config, devices, stage, c.split)})
                  .first;
    }
    const StepCommunication& comm = known->second.first;
    mem.comm_buffers = known->second.second;
    const StageTime st = stage_time(c, stage, comm);
    slowest_stage = std::max(slowest_stage, st.pipeline_s);
    worst_tail = std::max(worst_tail, st.tail_s);
    busy += (st.pipeline_s - st.t.bubble_s + st.tail_s) / c.m.pp;
    if (static_cast<double>(mem.total()) > worst_memory) {
      worst_memory = static_cast<double>(mem.total());
      s.worst_stage = stage, s.memory = mem, s.time = st.t;
      for (size_t a = 0; a < kNumAxes; ++a) {
        s.comm[a] = {comm.axes[a].calls(), comm.axes[a].payload_bytes(), comm.axes[a].wire_bytes()};
      }
    }
  }
  // Stages wait for each other: the step is the slowest stage's pipeline plus the longest tail.
  s.time.step_s = slowest_stage + worst_tail;
  const double lent = s.time.step_s - shared_core_step(c, s.time.step_s, busy);
  s.time.step_s -= lent;
  s.time.bubble_s = std::max(0.0, s.time.bubble_s - lent);
  return worst_memory;
}

void LayoutScorer::set_throughput(const Candidate& c, LayoutScore& s) {
  const RunConfig& config = c.config;
  const std::vector<double>& unit_recompute = recompute_flops(c);
  s.bubble = c.facts ? c.facts->bubble : 0.0;
  const double tokens = static_cast<double>(config.batch_size) * config.seq_len;
  const double model_flops = std::accumulate(unit_flops_.begin(), unit_flops_.end(), 0.0) * tokens;
  const double hardware_flops = model_flops + std::accumulate(unit_recompute.begin(), unit_recompute.end(), 0.0) * tokens;
  const double peak = c.cluster.device.peak_flops(config.precision.compute, config.precision.fp8);
  const double capacity = s.time.step_s * c.cluster.devices() * peak;
  s.mfu = model_flops / capacity;
  s.hfu = hardware_flops / capacity;
  s.tokens_per_s = tokens / s.time.step_s;
}

LayoutScore LayoutScorer::score(const RunConfig& config, const Cluster& cluster) {
  Candidate c = candidate(config, cluster);
  LayoutScore s;
  s.layout = Layout::of(config);
  s.layout.mesh = c.m;
  const double budget = cluster.device.memory_bytes;
  // Memory first, for every stage: a layout whose model states and activations already
  // overflow is rejected without predicting its communication.
  double worst_memory = -1;
  for (int stage = 0; stage < c.m.pp; ++stage) {
    s.stages.push_back(stage_memory(c, stage));
    if (static_cast<double>(s.stages.back().total()) > worst_memory) {
      worst_memory = static_cast<double>(s.stages.back().total()), s.worst_stage = stage;
    }
  }
  if (worst_memory > budget) {
    s.memory = s.stages[static_cast<size_t>(s.worst_stage)];
    s.rejected = overflow_message(s.memory, s.worst_stage, c.m.pp, budget);
    return s;
  }
  worst_memory = time_stages(c, s);  // now with each stage's communication buffers
  set_throughput(c, s);
  if (worst_memory > budget) s.rejected = overflow_message(s.memory, s.worst_stage, c.m.pp, budget);
  return s;
}

}  // namespace

LayoutScore score_layout(const RunConfig& config, const Cluster& cluster) {
  return LayoutScorer(config).score(config, cluster);
}

double moe_dispatch_bytes(const ModelConfig& model, const MeshShape& m, double tokens, double load) {
  const double k = model.moe_top_k, C = model.d_model, F = static_cast<double>(model.expert_d_ff()) / m.tp;
  const double S = tokens * k, R = S * load, gradient_buffers = model.arch == Arch::llama ? 3 : 2;
  const double floats = 6 * S * C + 4 * tokens * C + (m.ep > 1 ? 8 * R * C : 0) + R * C + gradient_buffers * R * F;
  return 4 * floats;
}

namespace {

// Every mesh of `devices` the model can take: pp at most the chunks the blocks fill
// (n_layer + 1), tp at most max_tp, ep dividing dp_shard x cp.
std::vector<MeshShape> candidate_meshes(int devices, int max_tp, const ModelConfig& model) {
  const std::vector<int> experts = model.is_moe() ? divisors(model.n_experts) : std::vector<int>{1};
  std::vector<MeshShape> meshes;
  for (int pp : divisors(devices)) {
    if (pp > model.n_layer + 1) continue;
    for (int tp : divisors(devices / pp)) {
      if (tp > max_tp) continue;
      for (int cp : divisors(devices / pp / tp)) {
        for (int dp_shard : divisors(devices / pp / tp / cp)) {
          for (int ep : experts) {
            if ((dp_shard * cp) % ep != 0) continue;
            meshes.push_back(MeshShape{pp, devices / pp / tp / cp / dp_shard, dp_shard, cp, tp, ep});
          }
        }
      }
    }
  }
  return meshes;
}

// Ulysses gives each cp rank whole heads of its tp rank's share.
bool ulysses_splits_heads(const ModelConfig& model, int tp, int cp) {
  return model.n_head % tp == 0 && model.kv_heads() % tp == 0 && (model.n_head / tp) % cp == 0 &&
         (model.kv_heads() / tp) % cp == 0;
}

// The context-parallel attentions tried on a mesh, each with its parallel.cp_ulysses:
// without cp the first mode alone; Ulysses where this tp rank's heads split over cp; USP
// with every divisor of cp strictly between 1 and cp over which they split.
std::vector<std::pair<CpMode, int>> cp_choices(const ModelConfig& model, const MeshShape& mesh,
                                               const std::vector<CpMode>& modes) {
  if (mesh.cp == 1) return {{modes.front(), 1}};
  std::vector<std::pair<CpMode, int>> choices;
  for (CpMode mode : modes) {
    if (mode == CpMode::ring) choices.emplace_back(mode, 1);
    if (mode == CpMode::ulysses && ulysses_splits_heads(model, mesh.tp, mesh.cp)) choices.emplace_back(mode, 1);
    if (mode != CpMode::usp) continue;
    for (int u : divisors(mesh.cp)) {
      if (u > 1 && u < mesh.cp && ulysses_splits_heads(model, mesh.tp, u)) choices.emplace_back(mode, u);
    }
  }
  return choices;
}

// ZeRO without ranks to shard over is DDP, not a layout of its own, unless it offloads;
// offload needs ZeRO (the optimizer) or FSDP without replicas (parameters).
bool offload_suits(int zero, const MeshShape& mesh, OffloadChoice offload) {
  if (zero > 0 && mesh.dp_shard * mesh.cp == 1 && offload == OffloadChoice::none) return false;
  if (offload != OffloadChoice::none && zero == 0) return false;
  return offload != OffloadChoice::params || (zero == 3 && mesh.dp_replicate == 1);
}

// The settings tried on one mesh, appended to `out`. Left out: what ndtrain's checks
// refuse whatever the other settings (Ulysses where the heads on a tp rank do not split
// over cp, USP where they do not over cp_ulysses).
void add_layouts_of_mesh(const MeshShape& mesh, const RunConfig& base, const PlanSpace& space,
                         const std::vector<OffloadChoice>& offloads, std::vector<Layout>& out) {
  for (int zero : space.zero_stages) {
    if (zero == 0 && mesh.dp_shard > 1 && mesh.ep == 1) continue;
    for (bool sp : {false, true}) {
      if (sp && mesh.tp == 1) continue;
      for (const auto& [cp_mode, cp_ulysses] : cp_choices(base.model, mesh, space.cp_modes)) {
        for (int micro : space.micro_batch_sizes) {
          for (CheckpointMode recompute : space.recompute) {
            for (PipelineSchedule schedule : space.pp_schedules) {
              if (mesh.pp == 1 && schedule != space.pp_schedules.front()) continue;
              for (OffloadChoice offload : offloads) {
                if (!offload_suits(zero, mesh, offload)) continue;
                Layout l;
                l.mesh = mesh, l.zero_stage = zero, l.sequence_parallel = sp, l.cp_mode = cp_mode;
                l.mesh.cp_ulysses = cp_ulysses;
                l.micro_batch_size = micro, l.recompute = recompute, l.offload = offload;
                l.pp_schedule = mesh.pp == 1 ? base.pp_schedule : schedule;
                l.pp_virtual_stages = mesh.pp == 1                                      ? 1
                                      : schedule == PipelineSchedule::interleaved_1f1b      ? space.interleaved_stages
                                      : pipeline_placement(schedule) == PipelinePlacement::v ? 2
                                                                                            : 1;
                if (space.admits && !space.admits(l)) continue;
                out.push_back(std::move(l));
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
std::vector<LayoutScore> score_candidates(const std::vector<Layout>& candidates, const RunConfig& base,
                                          const Cluster& cluster) {
  std::vector<LayoutScore> scores(candidates.size());
  const int threads = std::max(1, std::min<int>(static_cast<int>(std::thread::hardware_concurrency()), 16));
  const auto score_some = [&](int first) {
    LayoutScorer scorer(base);
    for (size_t i = static_cast<size_t>(first); i < candidates.size(); i += static_cast<size_t>(threads)) {
      try {
        scores[i] = scorer.score(candidates[i].apply(base), cluster);
      } catch (const Error& e) {
        LayoutScore& rejected = scores[i];
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
  return scores;
}

// Fitting layouts first, fastest first; then those out of memory, smallest first; then
// the invalid ones.
void rank_layouts(std::vector<LayoutScore>& layouts) {
  std::stable_sort(layouts.begin(), layouts.end(), [](const LayoutScore& a, const LayoutScore& b) {
    const int ra = a.rejected.empty() ? 0 : a.invalid ? 2 : 1, rb = b.rejected.empty() ? 0 : b.invalid ? 2 : 1;
    if (ra != rb) return ra < rb;
    if (ra == 0) return a.time.step_s < b.time.step_s;
    if (ra == 1) return a.memory.total() < b.memory.total();
    return false;
  });
}

}  // namespace

PlanResult plan_layouts(const RunConfig& base, const Cluster& cluster, const PlanSpace& space) {
  const auto t0 = std::chrono::steady_clock::now();
  base.model.validate();
  // Offload is planned where the profile knows the disk; elsewhere only in memory.
  const std::vector<OffloadChoice> offloads =
      cluster.device.disk_bytes_per_s > 0 ? space.offloads : std::vector<OffloadChoice>{OffloadChoice::none};
  const int max_tp = space.max_tp > 0 ? space.max_tp : cluster.devices_per_node;
  std::vector<Layout> candidates;
  for (const MeshShape& mesh : candidate_meshes(cluster.devices(), max_tp, base.model)) {
    add_layouts_of_mesh(mesh, base, space, offloads, candidates);
  }
  NDT_CHECK(!candidates.empty(), "no layout of {} devices keeps the settings given ({}) within the search's choices",
            cluster.devices(), space.fixed);
  PlanResult result;
  result.candidates = static_cast<int64_t>(candidates.size());
  result.layouts = score_candidates(candidates, base, cluster);
  for (const LayoutScore& s : result.layouts) ++(s.invalid ? result.invalid : s.rejected.empty() ? result.fitting : result.out_of_memory);
  NDT_CHECK(result.invalid < result.candidates,
            "no layout of {} devices can run this model and batch: each of the {} candidates is refused; the first: {}",
            cluster.devices(), result.candidates,
            result.layouts.empty() ? std::string("none") : result.layouts.front().rejected);
  rank_layouts(result.layouts);
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
