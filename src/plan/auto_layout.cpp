#include "plan/auto_layout.h"

#include "core/error.h"
#include "train/config_keys.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <type_traits>

namespace ndt {

namespace {

bool given(const std::vector<std::string>& keys, const char* key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

OffloadChoice offload_of(const RunConfig& c) {
  return c.offload_params ? OffloadChoice::params : c.offload_optimizer ? OffloadChoice::optimizer : OffloadChoice::none;
}

// The keys the search keeps, each once, as "key = value" (the value as the config holds it).
std::string fixed_settings(const RunConfig& config, const std::vector<std::string>& given_keys) {
  static const std::vector<std::string> layout_keys = {
      "parallel.pp", "parallel.dp_replicate", "parallel.dp_shard", "parallel.cp", "parallel.tp", "parallel.ep",
      "parallel.cp_ulysses", "parallel.zero_stage", "parallel.sequence_parallel", "parallel.cp_mode",
      "parallel.pp_schedule", "parallel.pp_virtual_stages", "train.micro_batch_size",
      "train.activation_checkpointing", "offload.optimizer", "offload.params"};
  std::string out;
  for (const std::string& key : layout_keys) {
    if (!given(given_keys, key.c_str())) continue;
    out += fmt::format("{}{} = {}", out.empty() ? "" : ", ", key, find_config_key(key)->get(config));
  }
  return out;
}

// The mesh axes the config fixes (0: free); dp_replicate and dp_shard given as 0 are
// automatic, so free too.
MeshShape fixed_mesh(const RunConfig& c, const std::vector<std::string>& keys) {
  const auto pick = [&](const char* key, int value) { return given(keys, key) ? value : 0; };
  return MeshShape{pick("parallel.pp", c.mesh.pp), pick("parallel.dp_replicate", c.mesh.dp_replicate),
                   pick("parallel.dp_shard", c.mesh.dp_shard), pick("parallel.cp", c.mesh.cp),
                   pick("parallel.tp", c.mesh.tp), pick("parallel.ep", c.mesh.ep),
                   pick("parallel.cp_ulysses", c.mesh.cp_ulysses)};
}

bool mesh_keeps(const MeshShape& fixed, const MeshShape& m) {
  const auto keeps = [](int want, int have) { return want == 0 || want == have; };
  return keeps(fixed.pp, m.pp) && keeps(fixed.dp_replicate, m.dp_replicate) && keeps(fixed.dp_shard, m.dp_shard) &&
         keeps(fixed.cp, m.cp) && keeps(fixed.tp, m.tp) && keeps(fixed.ep, m.ep) && keeps(fixed.cp_ulysses, m.cp_ulysses);
}

// The config to train with `layout`: an ordinary (manual) one.
RunConfig config_with(const RunConfig& base, const Layout& layout) {
  RunConfig c = layout.apply(base);
  c.layout = LayoutMode::manual;
  // Layout::apply recomputes every block; a full recompute the config gives keeps its interval.
  if (c.activation_checkpointing.mode == base.activation_checkpointing.mode) {
    c.activation_checkpointing.every = base.activation_checkpointing.every;
  }
  return c;
}

}  // namespace

PlanSpace constrained_space(const RunConfig& c, const std::vector<std::string>& keys) {
  NDT_CHECK(c.pp_layers.empty(),
            "parallel.layout = \"auto\" balances the pipeline's blocks itself: parallel.pp_layers = \"{}\" fixes a "
            "split it does not search (remove it, or set parallel.layout = \"manual\")",
            c.pp_layers);
  NDT_CHECK(c.pp_schedule != PipelineSchedule::seq1f1b && c.pp_seq_chunks == 1,
            "parallel.layout = \"auto\" does not search Seq1F1B: parallel.pp_schedule = \"{}\" with "
            "parallel.pp_seq_chunks = {} (choose another schedule, or set parallel.layout = \"manual\")",
            pipeline_schedule_name(c.pp_schedule), c.pp_seq_chunks);
  PlanSpace space;
  if (given(keys, "parallel.zero_stage")) space.zero_stages = {c.zero_stage};
  if (given(keys, "parallel.cp_mode")) space.cp_modes = {c.cp_mode};
  if (given(keys, "train.micro_batch_size") && c.micro_batch_size > 0) space.micro_batch_sizes = {c.micro_batch_size};
  if (given(keys, "train.activation_checkpointing")) space.recompute = {c.activation_checkpointing.mode};
  if (given(keys, "parallel.pp_schedule")) space.pp_schedules = {c.pp_schedule};
  const bool fixes_chunks = given(keys, "parallel.pp_virtual_stages");
  if (fixes_chunks && c.pp_virtual_stages >= 2) space.interleaved_stages = c.pp_virtual_stages;
  const bool fixes_offload = given(keys, "offload.optimizer") || given(keys, "offload.params");
  if (fixes_offload) space.offloads = {offload_of(c)};
  const MeshShape mesh = fixed_mesh(c, keys);
  const std::optional<bool> sp =
      given(keys, "parallel.sequence_parallel") ? std::optional<bool>(c.sequence_parallel) : std::nullopt;
  const int chunks = c.pp_virtual_stages;
  const OffloadChoice offload = offload_of(c);
  space.admits = [=](const Layout& l) {
    return mesh_keeps(mesh, l.mesh) && (!sp || *sp == l.sequence_parallel) &&
           (!fixes_chunks || l.pp_virtual_stages == chunks) && (!fixes_offload || l.offload == offload);
  };
  space.fixed = fixed_settings(c, keys);
  return space;
}

const LayoutScore* AutoLayout::runner_up() const {
  return plan.fitting > 1 ? &plan.layouts[1] : nullptr;
}

LayoutPrediction AutoLayout::prediction(const Cluster& cluster) const {
  LayoutPrediction p;
  p.layout = best().layout.describe();
  p.device = fmt::format("{}: {}", cluster.device.name, cluster.device.source);
  p.step_s = best().time.step_s;
  p.memory_bytes = best().memory.total();
  p.mfu = best().mfu;
  if (const LayoutScore* second = runner_up()) p.runner_up = second->layout.describe(), p.runner_up_step_s = second->time.step_s;
  return p;
}

AutoLayout choose_auto_layout(const RunConfig& config, const std::vector<std::string>& given_keys,
                              const Cluster& cluster) {
  AutoLayout choice;
  const PlanSpace space = constrained_space(config, given_keys);
  choice.fixed = space.fixed;
  choice.plan = plan_layouts(config, cluster, space);
  if (choice.plan.fitting == 0) {
    const auto closest = std::find_if(choice.plan.layouts.begin(), choice.plan.layouts.end(),
                                      [](const LayoutScore& s) { return !s.invalid; });
    fail("parallel.layout = \"auto\": no layout of {} {} devices ({} each) fits in memory{}: of {} candidates, {} are "
         "out of memory and {} refused by ndtrain's checks; the closest to fitting is {}: {}",
         cluster.devices(), cluster.device.name, memory_text(cluster.device.memory_bytes),
         choice.fixed.empty() ? "" : " with " + choice.fixed + " as the config gives them", choice.plan.candidates,
         choice.plan.out_of_memory, choice.plan.invalid, closest->layout.describe(), closest->rejected);
  }
  choice.config = config_with(config, choice.best().layout);
  return choice;
}

namespace {

std::string prediction_text(const LayoutScore& s, const Cluster& cluster) {
  return fmt::format("{}: predicted step {:.4g} s, memory {} of {} per device, MFU {:.1f}%, {:.4g} tokens/s",
                     s.layout.describe(), s.time.step_s, memory_text(static_cast<double>(s.memory.total())),
                     memory_text(cluster.device.memory_bytes), 100 * s.mfu, s.tokens_per_s);
}

}  // namespace

std::string describe_auto_layout(const AutoLayout& choice, const Cluster& cluster) {
  const PlanResult& p = choice.plan;
  std::string out = fmt::format(
      "parallel.layout = \"auto\": {} candidate layouts of {} devices: {} fit, {} out of memory, {} refused by "
      "ndtrain's checks; searched in {:.2f} s on {}: {}\n",
      p.candidates, cluster.devices(), p.fitting, p.out_of_memory, p.invalid, p.seconds, cluster.device.name,
      cluster.device.source);
  if (!choice.fixed.empty()) out += fmt::format("  kept as the config gives them: {}\n", choice.fixed);
  out += fmt::format("  chosen:    {}\n", prediction_text(choice.best(), cluster));
  if (const LayoutScore* second = choice.runner_up()) {
    out += fmt::format("  runner-up: {} ({:+.1f}%)\n", prediction_text(*second, cluster),
                       100 * (second->time.step_s / choice.best().time.step_s - 1));
  } else {
    out += "  runner-up: none (one layout fits)\n";
  }
  return out;
}

Cluster layout_cluster(const RunConfig& config, int world_size, int ranks_per_node) {
  const DeviceProfile device =
      config.layout_device == "cpu" ? measure_cpu_device(ranks_per_node) : resolve_device(config.layout_device);
  Cluster cluster = make_cluster(device, 0, ranks_per_node, world_size);
  cluster.expert_load = config.layout_expert_load;
  return cluster;
}

namespace {

// What rank 0 sends: the chosen layout and its prediction, or that it failed; then
// `text_chars` characters of the device's description or the error.
struct WireChoice {
  Layout best;
  double step_s = 0, runner_up_step_s = 0, mfu = 0;
  int64_t memory_bytes = 0;
  int64_t runner_up_chars = 0;  // of the text: the runner-up's describe() first, then the device's source
  int64_t text_chars = 0;
  int32_t failed = 0;
};
static_assert(std::is_trivially_copyable_v<WireChoice> && sizeof(WireChoice) % sizeof(int32_t) == 0);

// A broadcast from rank 0 that the other ranks wait for asleep, polling every millisecond.
void broadcast_from_rank_0(Communicator& world, void* data, size_t int32_count) {
  WorkHandle work = world.ibroadcast(data, int32_count, DType::i32, 0);
  if (world.rank() == 0) return work->wait();
  while (!work->test()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void broadcast_text(Communicator& world, std::string& text, int64_t chars) {
  std::vector<int32_t> words(static_cast<size_t>((chars + 3) / 4));
  if (world.rank() == 0) std::memcpy(words.data(), text.data(), static_cast<size_t>(chars));
  broadcast_from_rank_0(world, words.data(), words.size());
  text.assign(reinterpret_cast<const char*>(words.data()), static_cast<size_t>(chars));
}

}  // namespace

ChosenLayout resolve_auto_layout(const RunConfig& config, const std::vector<std::string>& given_keys,
                                 Communicator& world, int ranks_per_node, std::ostream* log) {
  WireChoice wire;
  std::string text;
  if (world.rank() == 0) {
    try {
      const Cluster cluster = layout_cluster(config, world.size(), ranks_per_node);
      const AutoLayout choice = choose_auto_layout(config, given_keys, cluster);
      if (log) *log << describe_auto_layout(choice, cluster) << std::flush;
      const LayoutPrediction p = choice.prediction(cluster);
      wire.best = choice.best().layout;
      wire.step_s = p.step_s, wire.runner_up_step_s = p.runner_up_step_s, wire.mfu = p.mfu;
      wire.memory_bytes = p.memory_bytes;
      wire.runner_up_chars = static_cast<int64_t>(p.runner_up.size());
      text = p.runner_up + p.device;
    } catch (const std::exception& e) {  // thrown on every rank below, not only here
      wire.failed = 1;
      text = e.what();
    }
    wire.text_chars = static_cast<int64_t>(text.size());
  }
  broadcast_from_rank_0(world, &wire, sizeof(wire) / sizeof(int32_t));
  broadcast_text(world, text, wire.text_chars);
  if (wire.failed) throw Error(text);
  ChosenLayout chosen;
  chosen.config = config_with(config, wire.best);
  LayoutPrediction& p = chosen.prediction;
  p.layout = wire.best.describe();
  p.runner_up = text.substr(0, static_cast<size_t>(wire.runner_up_chars));
  p.device = text.substr(static_cast<size_t>(wire.runner_up_chars));
  p.step_s = wire.step_s, p.runner_up_step_s = wire.runner_up_step_s, p.mfu = wire.mfu;
  p.memory_bytes = wire.memory_bytes;
  return chosen;
}

}  // namespace ndt
