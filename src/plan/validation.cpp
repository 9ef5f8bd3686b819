#include "plan/validation.h"

#include "core/error.h"
#include "core/output_file.h"
#include "core/rng.h"
#include "core/timing.h"
#include "data/shard.h"
#include "plan/calibration.h"
#include "plan/planner.h"
#include "plan/run_command.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <unistd.h>

namespace fs = std::filesystem;

namespace ndt {

namespace {

// Steps per run; the step time is the median of steps 3 onwards. Steps of 20-40 ms on
// ranks sharing cores vary with the scheduler's time slices: 18 of them, not 4.
constexpr int kValidationSteps = 20;
// The most rounds --rounds takes (each is a whole validation's runs: about a minute).
constexpr int kMaxRounds = 10;

struct ValidationCase {
  std::string name;
  int ranks;
  std::vector<std::string> settings;  // config overrides on top of the base file
};

// A case's model: the tiny preset as it is, or widened to d_model 256 with 8 heads over
// `layers` blocks (the small models, and the deep case at either size).
std::vector<std::string> model_settings(std::string_view preset, bool widened, int layers) {
  std::vector<std::string> s = {fmt::format("model.preset={}", preset)};
  if (!widened) return s;
  const bool llama = preset.starts_with("llama");
  s.insert(s.end(), {fmt::format("model.n_layer={}", layers), "model.d_model=256", "model.n_head=8",
                     llama ? "model.d_ff=704" : "model.d_ff=1024"});
  if (llama) s.push_back("model.n_kv_head=4");
  if (preset.find("moe") != std::string_view::npos) s.push_back("model.moe_d_ff=352");  // half the dense width
  return s;
}

// gpt2, llama and llama MoE models, each axis at least once, on 1, 2 and 4 ranks.
std::vector<ValidationCase> validation_cases(ValidationModels models) {
  const bool small = models == ValidationModels::small;
  const auto model_case = [&](std::string_view preset, const char* layout, int ranks, std::vector<std::string> parallel,
                              int layers = 8) {
    const bool widened = small || layers != 8;
    const std::string label = widened ? fmt::format("{} {}x256", preset.substr(0, preset.rfind('-')), layers)
                                      : std::string(preset);
    std::vector<std::string> settings = model_settings(preset, widened, layers);
    settings.insert(settings.end(), parallel.begin(), parallel.end());
    return ValidationCase{fmt::format("{}, {}", label, layout), ranks, settings};
  };
  return {
      model_case("gpt2-tiny", "one rank", 1, {}),
      model_case("gpt2-tiny", "ddp", 2, {}),
      model_case("gpt2-tiny", "fsdp", 2, {"parallel.dp_shard=2", "parallel.zero_stage=3"}),
      model_case("llama-tiny", "tp + sp", 2, {"parallel.tp=2", "parallel.sequence_parallel=true"}),
      model_case("llama-moe-tiny", "ep", 2, {"parallel.dp_shard=2", "parallel.ep=2"}),
      model_case("gpt2-tiny", "ddp", 2, {}, 12),
      model_case("gpt2-tiny", "zero2", 2, {"parallel.dp_shard=2", "parallel.zero_stage=2"}),
      model_case("gpt2-tiny", "zero1", 4, {"parallel.dp_shard=4", "parallel.zero_stage=1"}),
      model_case("llama-tiny", "pp x ddp", 4, {"parallel.pp=2", "train.micro_batch_size=1", "parallel.pp_schedule=1f1b"}),
      model_case("llama-tiny", "cp x fsdp", 4, {"parallel.cp=2", "parallel.dp_shard=2", "parallel.zero_stage=3"}),
  };
}

// Every record of a run's metrics.jsonl.
std::vector<nlohmann::json> metrics_records(const fs::path& metrics) {
  std::ifstream in(metrics);
  NDT_CHECK(in.good(), "the validation run wrote no metrics at {}", metrics.string());
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

// The run record, then the step records, of `records` (read from `metrics`).
std::vector<nlohmann::json> step_records(const std::vector<nlohmann::json>& records, const fs::path& metrics) {
  std::vector<nlohmann::json> steps;
  for (const nlohmann::json& r : records) {
    if ((r.contains("loss") && r.contains("step_s")) || r.contains("run")) steps.push_back(r);
  }
  NDT_CHECK(!steps.empty() && steps.front().contains("run"), "the validation run at {} logged no run record first",
            metrics.string());
  NDT_CHECK(steps.size() >= 4, "the validation run at {} logged {} steps, fewer than 3", metrics.string(),
            steps.size() - 1);
  return steps;
}

double relative_error(double measured, double predicted) {
  if (predicted == 0) return measured == 0 ? 0 : INFINITY;
  return measured / predicted - 1;
}

// One step's counters: the difference of the last two records' cumulative ones, per
// axis and operation.
std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> step_counters(const nlohmann::json& before,
                                                                                       const nlohmann::json& after) {
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> out;
  if (!after.contains("comm")) return out;
  for (const auto& [axis, ops] : after["comm"].items()) {
    for (const auto& [op, c] : ops.items()) {
      int64_t calls = c.at("calls").get<int64_t>(), wire = c.at("wire_bytes").get<int64_t>();
      if (before.contains("comm") && before["comm"].contains(axis) && before["comm"][axis].contains(op)) {
        calls -= before["comm"][axis][op].at("calls").get<int64_t>();
        wire -= before["comm"][axis][op].at("wire_bytes").get<int64_t>();
      }
      if (calls != 0) out[{axis, op}] = {calls, wire};
    }
  }
  return out;
}

// The steps' timed records (after the warm-up ones): those the median step time reads.
constexpr size_t kFirstTimedStep = 3;

// The experts' load of an MoE run (its records' moe.expert_load), the median over the
// timed steps; 1 for a dense model.
double median_expert_load(const std::vector<nlohmann::json>& steps) {
  std::vector<double> loads;
  for (size_t i = kFirstTimedStep; i < steps.size(); ++i) {
    if (steps[i].contains("moe")) loads.push_back(steps[i]["moe"].at("expert_load").get<double>());
  }
  return loads.empty() ? 1 : median_of_middle(loads);
}

// The timed steps' profiles (train.profile), each part's median.
StepParts median_step_parts(const std::vector<nlohmann::json>& steps) {
  std::array<std::vector<double>, kNumStepParts> by_part;
  for (size_t i = kFirstTimedStep; i < steps.size(); ++i) {
    NDT_CHECK(steps[i].contains("profile"), "the validation run's step {} has no profile (train.profile)",
              steps[i].at("step").get<int64_t>());
    const StepParts parts = measured_step_parts(steps[i].at("profile"));
    for (size_t p = 0; p < kNumStepParts; ++p) by_part[p].push_back(parts[p]);
  }
  StepParts medians{};
  for (size_t p = 0; p < kNumStepParts; ++p) medians[p] = median_of_middle(by_part[p]);
  return medians;
}

// Runs the case's training job into `out`.
void run_case(const ValidationCase& c, const fs::path& out, const std::string& base_config) {
  std::string command = this_binary_on_ranks(c.ranks);
  command += " train " + shell_quoted(base_config) + " --overwrite";
  for (const std::string& s : c.settings) command += " --set " + shell_quoted(s);
  command += " --set " + shell_quoted("runtime.out_dir=" + out.string()) + " --set train.profile=true";
  run_command(command, false);
}

// Memory per tag and the median step time against the plan's, with the mismatches.
void compare_memory_and_time(ValidationRow& row, const RunConfig& config, const LayoutScore& plan,
                             const std::vector<nlohmann::json>& steps) {
  const MemoryEstimate& predicted = plan.stages.front();  // rank 0 is pipeline stage 0
  const nlohmann::json& mem = steps.back().at("mem");
  const auto tag = [&](const char* name, const char* field) { return mem.at(name).at(field).get<double>(); };
  row.model_states[0] = tag("params", "current") + tag("grads", "current") + tag("optimizer", "current");
  row.model_states[1] = static_cast<double>(predicted.params + predicted.grads + predicted.optimizer);
  row.activations[0] = tag("activations", "peak");
  row.activations[1] = static_cast<double>(predicted.activations);
  row.comm_buffers[0] = tag("comm", "peak");
  row.comm_buffers[1] = static_cast<double>(predicted.comm_buffers);
  std::vector<double> times;
  for (size_t i = kFirstTimedStep; i < steps.size(); ++i) times.push_back(steps[i].at("step_s").get<double>());
  std::sort(times.begin(), times.end());
  row.step_s[0] = times[times.size() / 2];
  row.step_s[1] = plan.time.step_s / row.load;
  row.balanced_step_s /= row.load;
  row.predicted_time = fmt::format("compute {:.4f} s, exposed communication {:.4f} s, bubble {:.4f} s, optimizer {:.4f} s",
                                   plan.time.compute_s, plan.time.exposed_comm_s, plan.time.bubble_s, plan.time.optimizer_s);
  row.parts[0] = median_step_parts(steps);
  row.parts[1] = predicted_step_parts(plan.time);
  for (double& part : row.parts[1]) part /= row.load;

  // An MoE block's transient buffers (dispatch rows, the experts' backward scratch) and
  // its exchange scratch depend on the routing and are not predicted: reported only.
  // Under ZeRO/FSDP a bucket's or reduce-scatter's buffers are freed when a poll finds
  // them done, so the comm peak varies run to run: its prediction is the part every run
  // holds, a lower bound (plan/comm_model.h).
  const bool routed = config.model.is_moe(), timed = config.zero_stage > 0;
  for (const auto& [label, pair, enforced] :
       {std::tuple{"model states", row.model_states, true}, {"activations", row.activations, !routed},
        {"communication buffers", row.comm_buffers, !routed}}) {
    const double e = relative_error(pair[0], pair[1]);
    if (std::abs(e) <= 0.02) continue;
    const std::string text = fmt::format("{}: measured {} bytes, predicted {} ({:+.1f}%)", label, pair[0], pair[1], 100 * e);
    const bool lower_bound = timed && std::string(label) == "communication buffers";
    if (!enforced) {
      row.notes.push_back("routing-dependent, not enforced: " + text);
    } else if (lower_bound) {
      (e > 0 ? row.notes : row.mismatches).push_back("a lower bound under ZeRO/FSDP: " + text);
    } else {
      row.mismatches.push_back(text);
    }
  }
}

// Bytes: every reported axis's counters of the last step against the model.
void compare_counters(ValidationRow& row, const RunConfig& config, const LayoutScore& plan,
                      const std::vector<nlohmann::json>& steps) {
  if (row.ranks == 1) return;
  const StepCommunication comm = predict_step_communication(config, row.ranks, 0);
  const auto measured = step_counters(steps[steps.size() - 2], steps.back());
  for (size_t a = 0; a < kNumAxes; ++a) {
    const Axis axis = static_cast<Axis>(a);
    // The metrics report each communicator once (the trainer leaves out the aliases).
    if (is_alias_axis(axis, plan.layout.mesh)) continue;
    for (size_t op = 0; op < kNumCommOps; ++op) {
      const OpVolume& p = comm.axes[a].ops[op];
      const std::string axis_text(axis_name(axis)), op_text(comm_op_name(static_cast<CommOp>(op)));
      const auto it = measured.find({axis_text, op_text});
      const int64_t calls = it == measured.end() ? 0 : it->second.first;
      const int64_t wire = it == measured.end() ? 0 : it->second.second;
      row.calls[0] += calls, row.calls[1] += p.calls;
      row.wire_bytes[0] += wire, row.wire_bytes[1] += p.wire_bytes;
      // all_to_all_v's wire bytes depend on where the router sends tokens: an expectation.
      const bool expected_only = static_cast<CommOp>(op) == CommOp::all_to_all_v;
      const bool bytes_agree = expected_only ? std::abs(relative_error(static_cast<double>(wire), static_cast<double>(p.wire_bytes))) <= 0.25
                                             : wire == p.wire_bytes;
      if (calls != p.calls || !bytes_agree) {
        row.mismatches.push_back(fmt::format("{} {}: measured {} calls, {} wire bytes; predicted {} calls, {}", axis_text,
                                             op_text, calls, wire, p.calls, p.wire_bytes));
      }
    }
  }
}

ValidationRow validate_case(const ValidationCase& c, int index, const fs::path& dir, const std::string& base_config,
                            const Cluster& cluster) {
  ValidationRow row;
  row.name = c.name;
  row.ranks = c.ranks;
  const fs::path out = dir / fmt::format("run-{}", index);
  run_case(c, out, base_config);
  std::vector<std::string> settings = c.settings;
  settings.push_back("runtime.out_dir=" + out.string());
  const RunConfig config = read_run_config(base_config, settings);
  const std::vector<nlohmann::json> records = metrics_records(out / "metrics.jsonl");
  const std::vector<nlohmann::json> steps = step_records(records, out / "metrics.jsonl");
  row.expert_load = median_expert_load(steps);
  Cluster routed = cluster;
  routed.expert_load = row.expert_load;
  const LayoutScore plan = score_layout(config, routed);
  if (row.expert_load != 1) row.balanced_step_s = score_layout(config, cluster).time.step_s;
  const double run_fma = run_fma_flops(records);
  if (cluster.device.fma_flops_per_s > 0) row.load = run_fma / cluster.device.fma_flops_per_s;
  compare_memory_and_time(row, config, plan, steps);
  compare_counters(row, config, plan, steps);
  return row;
}

std::string percent(const double pair[2]) {
  const double e = relative_error(pair[0], pair[1]);
  return std::isfinite(e) ? fmt::format("{:+.1f}%", 100 * e) : "n/a";
}

// The given device files, by their devices_per_node.
std::map<int, Cluster> given_clusters(const std::vector<std::string>& device_files) {
  std::map<int, Cluster> clusters;
  for (const std::string& file : device_files) {
    const DeviceProfile d = load_device_profile(file);
    NDT_CHECK(!clusters.count(d.devices_per_node), "--device {}: a second device file for {} ranks (devices_per_node)",
              file, d.devices_per_node);
    clusters.emplace(d.devices_per_node, make_cluster(d, 1, d.devices_per_node, 0));
  }
  return clusters;
}

// The profile of `ranks` ranks: a given one, else calibrated now into `dir`, just before
// the runs it prices (a shared machine's load drifts). `calibrated` holds this round's:
// cleared each round, so that with --rounds N each run's prediction is the median over N
// calibrations as its measurement is over N runs. Calibrated once for all rounds, a
// 4-rank calibration read GEMM efficiencies of 0.45-0.61 in one validation and 0.56-0.81
// in the next, minutes apart, while the runs it priced stepped alike (docs/planner.md).
const Cluster& cluster_for(int ranks, int round, const std::map<int, Cluster>& given,
                           std::map<int, Cluster>& calibrated, const fs::path& dir) {
  if (given.count(ranks)) return given.at(ranks);
  if (!calibrated.count(ranks)) {
    const std::string file = round == 0 ? fmt::format("cpu-{}-ranks.toml", ranks)
                                        : fmt::format("cpu-{}-ranks-round-{}.toml", ranks, round + 1);
    calibrated.emplace(ranks, make_cluster(run_calibration(ranks, (dir / file).string()), 1, ranks, 0));
  }
  return calibrated.at(ranks);
}

// The runs' token shard and base config, written into `dir`; returns the config's path.
std::string write_base_config(const fs::path& dir) {
  // Random byte tokens: the runs measure memory, bytes and time, not learning.
  std::vector<uint16_t> tokens(200000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(philox(7, 0, i)[0] % 256);
  write_shard((dir / "train.bin").string(), tokens);
  const std::string base = (dir / "base.toml").string();
  const std::string text = fmt::format(
      "[train]\nsteps = {}\nbatch_size = 8\nseq_len = 64\neval_every = 0\nlog_every = 1\n"
      "[data]\ntrain = \"{}\"\n[sample]\ntokens = 0\n[checkpoint]\nevery = 0\nsave_on_exit = false\n",
      kValidationSteps, (dir / "train.bin").string());
  AtomicFile file(base);
  file.write(text.data(), text.size());
  file.commit();
  return base;
}

void print_progress(const ValidationRow& r) {
  fmt::print("  {:<24} {} rank{}: model states {}, activations {}, comm buffers {}, bytes {} / {}, step {:.4f} s "
             "against {:.4f} s predicted ({})\n",
             r.name, r.ranks, r.ranks == 1 ? "" : "s", percent(r.model_states), percent(r.activations),
             percent(r.comm_buffers), r.wire_bytes[0], r.wire_bytes[1], r.step_s[0], r.step_s[1], percent(r.step_s));
  fmt::print("  {:<24} predicted {}; load {:.2f} (the run's FMA loop over the calibration's){}\n", "",
             r.predicted_time, r.load,
             r.expert_load != 1 ? fmt::format("; experts' load {:.2f} (the run's routing: the most loaded ep rank's "
                                              "expert rows over the mean; balanced, the prediction is {:.4f} s)",
                                              r.expert_load, r.balanced_step_s)
                                : "");
  std::string parts;
  for (size_t p = 0; p < kNumStepParts; ++p) {
    const double pair[2] = {r.parts[0][p], r.parts[1][p]};
    parts += fmt::format("{}{} {:.4f} / {:.4f}{}", p == 0 ? "" : ", ", step_part_name(static_cast<StepPart>(p)),
                         pair[0], pair[1], pair[1] > 0 ? fmt::format(" ({})", percent(pair)) : "");
  }
  fmt::print("  {:<24} by part, measured / predicted s: {}\n", "", parts);
  std::fflush(stdout);
}

// Each part over the runs: the median of measured / predicted - 1 where the model
// prices it, and its share of the measured steps.
void print_parts_summary(const std::vector<ValidationRow>& rows) {
  double steps = 0;
  for (const ValidationRow& r : rows) steps += r.step_s[0];
  std::string text;
  for (size_t p = 0; p < kNumStepParts; ++p) {
    std::vector<double> errors;
    double measured = 0;
    for (const ValidationRow& r : rows) {
      measured += r.parts[0][p];
      if (r.parts[1][p] > 0) errors.push_back(relative_error(r.parts[0][p], r.parts[1][p]));
    }
    text += fmt::format("{}{} {:.1f}% of the steps{}", p == 0 ? "" : "; ", step_part_name(static_cast<StepPart>(p)),
                        100 * measured / steps,
                        errors.empty() ? "" : fmt::format(", median error {:+.1f}%", 100 * median_of_middle(errors)));
  }
  fmt::print("by part over the runs (measured against predicted): {}\n", text);
}

// The table of the (merged) rows with their findings; returns the rows that failed.
int print_table(const std::vector<ValidationRow>& rows) {
  fmt::print("\n{:<24} {:>5} {:>16} {:>16} {:>16} {:>14} {:>10} {:>10} {:>8}\n", "run", "ranks", "model states",
             "activations", "comm buffers", "wire bytes", "step", "predicted", "error");
  int failures = 0;
  for (const ValidationRow& r : rows) {
    fmt::print("{:<24} {:>5} {:>16} {:>16} {:>16} {:>14} {:>9.4f}s {:>9.4f}s {:>8}\n", r.name, r.ranks,
               fmt::format("{:.0f} {}", r.model_states[0], percent(r.model_states)),
               fmt::format("{:.0f} {}", r.activations[0], percent(r.activations)),
               fmt::format("{:.0f} {}", r.comm_buffers[0], percent(r.comm_buffers)),
               r.wire_bytes[0] == r.wire_bytes[1] ? fmt::format("{} =", r.wire_bytes[0])
                                                  : fmt::format("{} vs {}", r.wire_bytes[0], r.wire_bytes[1]),
               r.step_s[0], r.step_s[1], percent(r.step_s));
    for (const std::string& m : r.mismatches) fmt::print("    MISMATCH {}\n", m);
    for (const std::string& n : r.notes) fmt::print("    {}\n", n);
    failures += r.mismatches.empty() ? 0 : 1;
  }
  return failures;
}

}  // namespace

const char* step_part_name(StepPart part) {
  switch (part) {
    case StepPart::matmuls: return "matmuls";
    case StepPart::attention: return "attention";
    case StepPart::other_kernels: return "other kernels";
    case StepPart::optimizer: return "optimizer";
    case StepPart::communication: return "communication";
    case StepPart::unaccounted: return "unaccounted";
  }
  return "unknown";
}

double run_fma_flops(const std::vector<nlohmann::json>& records) {
  double start = 0, end = 0;
  for (const nlohmann::json& r : records) {
    if (r.contains("run")) start = r["run"].at("peak_flops").get<double>();
    if (r.contains("summary") && r["summary"].value("peak_flops_at_end", nlohmann::json()).is_number()) {
      end = r["summary"]["peak_flops_at_end"].get<double>();
    }
  }
  NDT_CHECK(start > 0, "the validation run logged no run record with its peak_flops");
  return std::max(start, end);
}

StepParts measured_step_parts(const nlohmann::json& profile) {
  // The metrics' keys (kernels::op_class_key, StepProfile) by the part they count to.
  static const std::map<std::string, StepPart, std::less<>> parts = {
      {"gemm_fp32", StepPart::matmuls},          {"gemm_16bit", StepPart::matmuls},
      {"gemm_fp8", StepPart::matmuls},           {"attention", StepPart::attention},
      {"cross_entropy", StepPart::other_kernels}, {"norm", StepPart::other_kernels},
      {"elementwise", StepPart::other_kernels},  {"cast", StepPart::other_kernels},
      {"moe_routing", StepPart::other_kernels},  {"optimizer", StepPart::optimizer},
      {"communication", StepPart::communication}, {"rank_wait", StepPart::communication},
      {"unaccounted", StepPart::unaccounted}};
  StepParts out{};
  for (const auto& [key, seconds] : profile.items()) {
    if (key == "rank" || key == "step_s") continue;  // whose step it is, and its length
    const auto it = parts.find(key);
    NDT_CHECK(it != parts.end(), "a step profile's key {} is not a kernel class, communication or the rest", key);
    out[static_cast<size_t>(it->second)] += seconds.get<double>();
  }
  return out;
}

StepParts predicted_step_parts(const TimeEstimate& t) {
  StepParts out{};
  out[static_cast<size_t>(StepPart::matmuls)] = t.matmul_s;
  out[static_cast<size_t>(StepPart::attention)] = t.attention_s;
  out[static_cast<size_t>(StepPart::other_kernels)] = t.memory_s + t.step_copies_s;
  out[static_cast<size_t>(StepPart::optimizer)] = t.optimizer_s - t.step_copies_s;
  out[static_cast<size_t>(StepPart::communication)] = t.exposed_comm_s + t.bubble_s + t.offload_io_s;
  return out;
}

ValidationModels parse_validation_models(const std::string& name) {
  if (name == "small") return ValidationModels::small;
  if (name == "tiny") return ValidationModels::tiny;
  throw Error(fmt::format("--validate-models {}: expected small or tiny", name));
}

const char* validation_models_name(ValidationModels models) {
  return models == ValidationModels::small ? "small" : "tiny";
}

ValidationRow merge_validation_rounds(const std::vector<ValidationRow>& rounds, double time_bound) {
  NDT_CHECK(!rounds.empty(), "merge_validation_rounds: no rounds");
  ValidationRow row = rounds.front();  // the first round's memory and bytes for the table
  row.mismatches.clear(), row.notes.clear();
  std::vector<double> measured, predicted, loads, expert_loads;
  for (size_t r = 0; r < rounds.size(); ++r) {
    const ValidationRow& round = rounds[r];
    measured.push_back(round.step_s[0]), predicted.push_back(round.step_s[1]), loads.push_back(round.load);
    expert_loads.push_back(round.expert_load);
    const std::string prefix = rounds.size() > 1 ? fmt::format("round {}: ", r + 1) : "";
    for (const std::string& m : round.mismatches) row.mismatches.push_back(prefix + m);
    for (const std::string& n : round.notes) row.notes.push_back(prefix + n);
  }
  row.step_s[0] = median_of_middle(measured), row.step_s[1] = median_of_middle(predicted),
  row.load = median_of_middle(loads), row.expert_load = median_of_middle(expert_loads);
  for (int side = 0; side < 2; ++side) {
    for (size_t p = 0; p < kNumStepParts; ++p) {
      std::vector<double> values;
      for (const ValidationRow& round : rounds) values.push_back(round.parts[side][p]);
      row.parts[side][p] = median_of_middle(values);
    }
  }
  const double e = relative_error(row.step_s[0], row.step_s[1]);
  if (!(std::abs(e) <= time_bound)) {
    row.mismatches.push_back(fmt::format("step time: measured {:.4f} s, predicted {:.4f} s ({:+.1f}%, the bound {:.0f}%{})",
                                         row.step_s[0], row.step_s[1], 100 * e, 100 * time_bound,
                                         rounds.size() > 1 ? fmt::format("; medians of {} rounds", rounds.size()) : ""));
  }
  return row;
}

Repeatability validation_repeatability(const std::vector<std::vector<ValidationRow>>& by_case, double time_bound) {
  Repeatability r;
  std::vector<double> differences;
  for (const std::vector<ValidationRow>& rounds : by_case) {
    for (size_t i = 0; i < rounds.size(); ++i) {
      for (size_t j = 0; j < rounds.size(); ++j) {
        if (i == j) continue;
        const double d = std::abs(relative_error(rounds[i].step_s[0], rounds[j].step_s[0]));
        if (d > r.largest || differences.empty()) r.largest = d, r.largest_run = rounds[i].name;
        differences.push_back(d);
        ++r.pairs, r.within += d <= time_bound ? 1 : 0;
      }
    }
  }
  r.median = median_of_middle(differences);
  return r;
}

int run_plan_validation(const ValidationOptions& o) {
  NDT_CHECK(o.time_bound_percent > 0 && std::isfinite(o.time_bound_percent),
            "--time-bound {} must be a positive percentage", o.time_bound_percent);
  NDT_CHECK(o.rounds >= 1 && o.rounds <= kMaxRounds, "--rounds {} must lie in [1, {}]", o.rounds, kMaxRounds);
  const double time_bound = o.time_bound_percent / 100;
  const fs::path dir = o.dir.empty() ? fs::temp_directory_path() / fmt::format("ndtrain-plan-validate-{}", ::getpid())
                                     : fs::path(o.dir);
  fs::create_directories(dir);
  const std::string base = write_base_config(dir);
  const std::map<int, Cluster> given = given_clusters(o.device_files);
  std::map<int, Cluster> calibrated;
  const std::vector<ValidationCase> cases = validation_cases(o.models);
  fmt::print("validating the planner against {} runs of {} models on this machine ({} steps each{}; in {})\n",
             cases.size(), validation_models_name(o.models), kValidationSteps,
             o.rounds > 1 ? fmt::format(", {} rounds", o.rounds) : "", dir.string());
  std::vector<std::vector<ValidationRow>> by_case(cases.size());
  for (int round = 0; round < o.rounds; ++round) {
    if (o.rounds > 1) fmt::print("round {} of {}\n", round + 1, o.rounds);
    calibrated.clear();
    for (size_t i = 0; i < cases.size(); ++i) {
      const Cluster& cluster = cluster_for(cases[i].ranks, round, given, calibrated, dir);
      const int index = round * static_cast<int>(cases.size()) + static_cast<int>(i) + 1;
      by_case[i].push_back(validate_case(cases[i], index, dir, base, cluster));
      print_progress(by_case[i].back());
    }
  }
  for (const auto& [ranks, cluster] : given) fmt::print("profile for {} ranks: {}\n", ranks, cluster.device.source);
  for (const auto& [ranks, cluster] : calibrated) {
    fmt::print("profile for {} ranks{}: {}\n", ranks, o.rounds > 1 ? " (the last round's)" : "", cluster.device.source);
  }

  std::vector<ValidationRow> rows;
  std::vector<double> errors;
  for (const std::vector<ValidationRow>& rounds : by_case) {
    rows.push_back(merge_validation_rounds(rounds, time_bound));
    errors.push_back(std::abs(relative_error(rows.back().step_s[0], rows.back().step_s[1])));
  }
  const int failures = print_table(rows);
  print_parts_summary(rows);
  fmt::print("\nmemory within 2%, bytes equal and step time within {:g}%{}: {} of {} runs; step time: median |error| "
             "{:.1f}%, largest {:.1f}%\n",
             o.time_bound_percent, o.rounds > 1 ? fmt::format(" (medians of {} rounds)", o.rounds) : "",
             rows.size() - failures, rows.size(), 100 * median_of_middle(errors),
             100 * *std::max_element(errors.begin(), errors.end()));
  if (o.rounds > 1) {
    const Repeatability r = validation_repeatability(by_case, time_bound);
    fmt::print("the rounds against each other (this machine's repeatability, the floor under any model's error): a "
               "run's step within {:g}% of the same run's in another round in {} of {} pairs; median |difference| "
               "{:.1f}%, largest {:.1f}% ({})\n",
               o.time_bound_percent, r.within, r.pairs, 100 * r.median, 100 * r.largest, r.largest_run);
  }
  if (!o.keep && o.dir.empty()) fs::remove_all(dir);
  return failures == 0 ? 0 : 1;
}

}  // namespace ndt
