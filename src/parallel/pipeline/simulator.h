// Pipeline simulator. Splits nothing and communicates nothing: it times the action
// lists of parallel/pipeline/schedule.h, which decide the order of work and
// communication of the pp axis, with a cost per action, and draws the timeline.
//
// Each rank runs its list in order. A compute action takes its cost; a send takes no
// time on its rank and its tensor arrives communication later; a receive waits until
// the tensor has arrived. The bubble of a rank is the part of the makespan (the end of
// the last action of any rank) it spends not computing.
#pragma once

#include "parallel/pipeline/schedule.h"

#include <string>
#include <vector>

namespace ndt {

// Costs of one micro-batch through one rank's share of the model (all its v chunks:
// a chunk costs cost / v; with k sequence chunks a unit of work costs cost / k), in any
// unit of time. The defaults are the textbook ones:
// backward twice the forward, split evenly into input and weight gradients.
struct PipelineCosts {
  double forward = 1;
  double backward = 2;
  double backward_input = 1;
  double backward_weight = 1;
  double communication = 0;  // per boundary tensor, from its send to its arrival
};

// Throws ndt::Error naming the cost (and the CLI option) that is not finite, a compute
// cost that is not positive or a communication cost below zero.
void check_pipeline_costs(const PipelineCosts& costs);

struct TimedPipelineAction {
  double start = 0, end = 0;  // a receive: from reaching it to its tensor's arrival
  PipelineAction action;
};

struct PipelineSimulation {
  PipelineShape shape;
  std::vector<std::vector<TimedPipelineAction>> timeline;  // per rank, in its order
  double makespan = 0;
  std::vector<double> busy;     // per rank: time spent computing
  std::vector<double> bubble;   // per rank: (makespan - busy) / makespan
  double mean_bubble = 0;
  // Per rank: the most (micro-batch, chunk) activations held at once (seq1f1b: (micro-
  // batch, sequence chunk, chunk) units, each 1 / k of a micro-batch's), each live from
  // its Forward until its Backward, or its BackwardWeight after a BackwardInput.
  std::vector<int> peak_live_activations;
  // Per rank: the most micro-batch contexts held at once (peak_live_contexts).
  std::vector<int> peak_live_contexts;
};

// Checks the lists (check_pipeline_actions) and times them.
PipelineSimulation simulate_pipeline(const std::vector<std::vector<PipelineAction>>& ranks,
                                     const PipelineShape& shape, const PipelineCosts& costs);
// The same with each rank's own costs (stages differ: the first holds the embedding,
// the last the output layer and loss).
PipelineSimulation simulate_pipeline(const std::vector<std::vector<PipelineAction>>& ranks,
                                     const PipelineShape& shape, const std::vector<PipelineCosts>& costs_per_rank);
PipelineSimulation simulate_pipeline(PipelineSchedule schedule, const PipelineShape& shape,
                                     const PipelineCosts& costs = {});

// The bubble fraction the literature predicts for a schedule with these costs and no
// communication time, and the formula it comes from (p = pp):
//   gpipe, 1f1b       (p-1) / (m + p - 1)                        (GPipe; Narayanan et al. 2021)
//   interleaved_1f1b  (p-1) / (v m + p - 1): the bubble time divided by v (Narayanan et al. 2021)
//   seq1f1b           (p-1) / (k m + p - 1): k m units of 1 / k (Sun et al. 2024)
//   zb_h1             (p-1)(F + BI - BW) / (m(F + BI + BW) + (p-1)(F + BI - BW))  (Qi et al. 2023)
//   zb_v              (p-1)(F/2) / (m(F + BI + BW) + (p-1)(F/2)): zero bubble at F = BI = BW
//                     (Qi et al. 2024, section 6) but for the ramp, p - 1 chunk-forwards
//                     before rank p - 1 starts; the simulator gives it at F = BI = BW, m >= 2p - 1
//   dualpipev         idle (p-1)(F&B + B - 3W) over it plus m(F + BI + BW), with chunk costs
//                     F = F/2, B = (BI + BW)/2, W = BW/2 and F&B = F + B (DualPipe's README
//                     table, "PP/2 - 1" for its PP = 2p stages); at F = BI = BW, m >= 2p
struct PipelineBubbleTheory {
  double fraction = 0;
  std::string formula;  // e.g. "(p-1)/(m+p-1) = 3/11"
};
PipelineBubbleTheory pipeline_bubble_theory(PipelineSchedule schedule, const PipelineShape& shape,
                                            const PipelineCosts& costs);

// One line per rank, time running left to right: each compute action as its kind
// (F, B, I for BackwardInput, W for BackwardWeight) and micro-batch, with the rank's
// chunk index (a, b, ...) when v > 1 or ".s", the sequence chunk, when k > 1, padded to
// its length; '.' where the rank waits.
// Preceded by the scale (time per column). A line has at most 65536 columns whatever
// the costs' ratio: beyond that actions shorter than a column share columns.
std::string render_pipeline_text(const PipelineSimulation& simulation);
// An SVG document: one row per rank, a box per compute action coloured by kind (and
// shaded by chunk when v > 1) labelled with its micro-batch, a time axis, a legend and
// the title given; at most 100000 px wide whatever the costs' ratio.
std::string render_pipeline_svg(const PipelineSimulation& simulation, const std::string& title);

}  // namespace ndt
