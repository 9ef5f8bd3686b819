// `ndtrain plan --validate`: the planner held to real runs on this machine. A fixed set
// of small layouts (1, 2 and 4 ranks; gpt2-tiny, llama-tiny, llama-moe-tiny and a
// 12-layer model) is trained for a few steps under mpirun, and each run's metrics are
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
//              (default 20%)
#pragma once

#include <string>
#include <vector>

namespace ndt {

struct ValidationRow {
  std::string name;
  int ranks = 1;
  // measured / predicted
  double model_states[2] = {0, 0};
  double activations[2] = {0, 0};
  double comm_buffers[2] = {0, 0};
  double step_s[2] = {0, 0};  // the prediction scaled by the load (below)
  // How much of the machine the run had against its calibration: the FMA loop the run
  // measured at its start over the profile's (1 without a calibrated profile).
  double load = 1;
  std::string predicted_time;  // the prediction's parts
  int64_t wire_bytes[2] = {0, 0};  // one step, all axes
  int64_t calls[2] = {0, 0};
  std::vector<std::string> mismatches;  // a bound not held, each naming the quantity
  std::vector<std::string> notes;       // off by more than 2% where only reported (routing) or bounded (ZeRO buffers)
};

// Runs the set in `dir` (empty: a fresh temporary folder, removed afterwards unless
// keep), printing one line per run as it finishes and then the table; returns 0 when
// every bound holds, 1 otherwise. `device_files`: device files (`ndtrain plan
// --calibrate`), each used for the runs of its devices_per_node ranks; the rank counts
// without one are calibrated first, into `dir`. time_bound_percent: the step-time bound.
int run_plan_validation(const std::string& dir, bool keep, const std::vector<std::string>& device_files,
                        double time_bound_percent);

}  // namespace ndt
