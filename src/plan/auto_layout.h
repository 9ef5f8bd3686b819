// parallel.layout = "auto" (`ndtrain train --layout auto`): the run's layout chosen at
// start-up by the planner (plan/planner.h). Every layout of the job's world size is
// searched on a device profile (parallel.layout_device: this machine measured, a
// built-in GPU or a device file) within the device's memory, with the layout settings
// the config gives explicitly kept fixed, and the fastest predicted one is trained.
//
// Every rank must train the same layout, and a measured profile differs from rank to
// rank and run to run: so rank 0 alone measures and searches while the others wait
// without spinning (a polling rank would take the cores the measurement times), and the
// choice (or the error) is broadcast.
#pragma once

#include "comm/communicator.h"
#include "plan/planner.h"
#include "train/config.h"
#include "train/layout_check.h"

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace ndt {

// The search narrowed to the settings `given_keys` (given_config_keys) fix, each at the
// config's value: the mesh axes, the ZeRO stage, sequence parallel, the cp mode, the
// micro-batch, the recompute policy, the pipeline schedule and its chunks, offload.
// Throws for what the search cannot keep (parallel.pp_layers, seq1f1b), naming it.
PlanSpace constrained_space(const RunConfig& config, const std::vector<std::string>& given_keys);

struct AutoLayout {
  PlanResult plan;            // every candidate, the fitting ones first, fastest first
  std::string fixed;          // the settings kept ("parallel.tp = 2"); empty: none
  const LayoutScore& best() const { return plan.layouts.front(); }
  const LayoutScore* runner_up() const;  // null when only one layout fits
  RunConfig config;           // the config with best()'s settings, parallel.layout = "manual"
  LayoutPrediction prediction(const Cluster& cluster) const;
};

// The search and the choice, the same for the same inputs. Throws when nothing fits,
// naming the layout closest to fitting and what overflows.
AutoLayout choose_auto_layout(const RunConfig& config, const std::vector<std::string>& given_keys,
                              const Cluster& cluster);
// What `ndtrain train` prints: the search's counts, the chosen layout with its predicted
// step, memory and MFU, the runner-up, the settings kept.
std::string describe_auto_layout(const AutoLayout& choice, const Cluster& cluster);

// The cluster a job of `world_size` ranks, `ranks_per_node` on each node, runs on, of the
// profile parallel.layout_device names ("cpu": this machine measured for ranks_per_node
// ranks), with the experts' load parallel.layout_expert_load.
Cluster layout_cluster(const RunConfig& config, int world_size, int ranks_per_node);

struct ChosenLayout {
  RunConfig config;              // to train: an ordinary (manual) config
  LayoutPrediction prediction;
};

// Collective over `world`: rank 0 builds the cluster, chooses and prints (to log, when
// given), every rank receives the same choice; an error on rank 0 (nothing fits, a bad
// device file) is thrown on every rank.
ChosenLayout resolve_auto_layout(const RunConfig& config, const std::vector<std::string>& given_keys,
                                 Communicator& world, int ranks_per_node, std::ostream* log);

}  // namespace ndt
