// `ndtrain plan --validate`: the planner held to real runs on this machine. A fixed set
// of small layouts (1, 2 and 4 ranks; gpt2, llama and llama MoE models, one of 12
// layers) is trained for a few steps under mpirun, and each run's metrics are
// set against the planner's prediction for the same config on the measured CPU profile:
//   bytes      each mesh axis's calls and wire bytes of one step (the counters) against
//              predict_step_communication: equal (all_to_all_v's wire bytes, routing-
//              dependent, within 25%)
//   memory     the ledger's model states after a step, and its activation and
//              communication-buffer peaks, against the planner's memory: within 2%
//              (an MoE run's activations and buffers, which depend on the routing and
//              leave out transient dispatch buffers, are reported, not enforced; under
//              ZeRO/FSDP the comm-buffer prediction is a lower bound, the peak depending
//              on when a poll finds a reduction done)
//   step time  the median step against the planner's step time on a calibrated profile
//              (plan/calibration.h) of the run's rank count, divided by the run's load
//              factor (its own FMA measurement at start over the calibration's: a shared
//              machine gives a run a varying share of its cores): within the time bound
//              (default 20%); an MoE run under ep is predicted with the experts'
//              load its routing had (its metrics' moe.expert_load, the median over
//              the timed steps: Cluster::expert_load); with --rounds N, the medians over N runs of the set, beside
//              how closely the rounds agree with each other
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <string>
#include <vector>

namespace ndt {

struct TimeEstimate;

// A step by the parts the kernels' profile measures (train.profile: metrics records'
// "profile") and the model prices (TimeEstimate), so a step's error can be traced to
// the term that makes it:
//   matmuls         the GEMMs of every dtype                  matmul_s
//   attention       the attention core                        attention_s
//   other kernels   norms, elementwise, casts, cross-entropy, memory_s + step_copies_s
//                   MoE routing
//   optimizer       the update and the gradient norm          optimizer_s - step_copies_s
//   communication   blocked in collectives, point-to-point    exposed_comm_s + bubble_s
//                   and barriers, and driving non-blocking     + offload_io_s
//                   ones (their starts and polls)
//   unaccounted     what no timer saw                         (not priced: 0)
enum class StepPart { matmuls, attention, other_kernels, optimizer, communication, unaccounted };
inline constexpr size_t kNumStepParts = 6;
using StepParts = std::array<double, kNumStepParts>;
const char* step_part_name(StepPart part);  // "matmuls", "attention", "other kernels", ...
// The FMA loop's rate a validation run had, which its load factor sets against the
// calibration's: the larger of the run's peak at its start (the run record's peak_flops)
// and after its last step (the summary's peak_flops_at_end, which train.profile takes).
// A moment's other work slows one of the two (a one-rank run read half the calibration's
// at its start and then stepped as fast as in the round before); a load that lasts slows
// both. `records`: the run's metrics.jsonl, a record each; throws without a run record.
double run_fma_flops(const std::vector<nlohmann::json>& records);

StepParts measured_step_parts(const nlohmann::json& profile);  // a step record's "profile"; throws naming a bad key
StepParts predicted_step_parts(const TimeEstimate& time);

struct ValidationRow {
  std::string name;
  int ranks = 1;
  // measured / predicted
  double model_states[2] = {0, 0};
  double activations[2] = {0, 0};
  double comm_buffers[2] = {0, 0};
  double step_s[2] = {0, 0};  // the prediction scaled by the load (below)
  // How much of the machine the run had against its calibration: the run's FMA loop
  // (run_fma_flops) over the profile's (1 without a calibrated profile).
  double load = 1;
  // MoE under ep: the experts' load the run's routing had, which the prediction assumes
  // (the most loaded ep rank's expert rows over the mean rank's; 1 otherwise).
  double expert_load = 1;
  double balanced_step_s = 0;  // the prediction under balanced routing (expert_load 1), load-scaled
  std::string predicted_time;  // the prediction's parts
  // measured (the step's slowest rank's profile: the medians over the timed steps) /
  // predicted (scaled by the load)
  StepParts parts[2] = {};
  int64_t wire_bytes[2] = {0, 0};  // one step, all axes
  int64_t calls[2] = {0, 0};
  std::vector<std::string> mismatches;  // a bound not held, each naming the quantity
  std::vector<std::string> notes;       // off by more than 2% where only reported (routing) or bounded (ZeRO buffers)
};

// The models the set trains (--validate-models): `small` (the default) widens every case
// to d_model 256 with 8 heads over 8 blocks, so steps take 0.1-0.4 s on a 2-core VM; `tiny`
// trains the presets as they are (CI's: 20-40 ms steps, which on a shared VM move by
// 15-25% from one validation to the next with the scheduler's time slices and the
// per-call costs, more than the bound). Both keep a 12-block case.
enum class ValidationModels { small, tiny };
ValidationModels parse_validation_models(const std::string& name);  // throws naming the value
const char* validation_models_name(ValidationModels models);

struct ValidationOptions {
  std::string dir;                        // empty: a fresh temporary folder, removed afterwards unless keep
  bool keep = false;
  std::vector<std::string> device_files;  // device files (`ndtrain plan --calibrate`), one per rank count
  double time_bound_percent = 20;         // the step-time bound
  ValidationModels models = ValidationModels::small;
  // Times the whole set runs (--rounds). With two or more, each run's measured and
  // predicted steps are the medians over the rounds, and a line sets the rounds against
  // each other: the machine's own repeatability, the floor under any model's error.
  // Three by default: on the development VM one round's run moved by up to 35-68% from
  // the same run in another round, more than the 20% bound (docs/planner.md).
  int rounds = 3;
};

// One case's rounds as one row: memory and bytes are held in every round (with several
// rounds, each finding names its round; the table shows the first round's figures); the
// step time is the median measured step against the median prediction (each round's
// divided by its own load), checked against time_bound (a fraction: 0.2 is 20%); each
// step part the median of the rounds' too.
ValidationRow merge_validation_rounds(const std::vector<ValidationRow>& rounds, double time_bound);

// The rounds against each other: each run's measured step in one round taken as the
// "prediction" of the same run's step in every other round (ordered pairs). No model can
// hold the bound more often than the machine repeats itself.
struct Repeatability {
  int within = 0;  // pairs within the bound
  int pairs = 0;
  double median = 0, largest = 0;  // of |difference|, fractions
  std::string largest_run;         // the run of the largest
};
Repeatability validation_repeatability(const std::vector<std::vector<ValidationRow>>& by_case, double time_bound);

// Runs the set, printing one line per run as it finishes and then the table; returns 0
// when every bound holds, 1 otherwise. Each device file is used for the runs of its
// devices_per_node ranks; the rank counts without one are calibrated first (once, before
// their first run), into the folder.
int run_plan_validation(const ValidationOptions& options);

}  // namespace ndt
