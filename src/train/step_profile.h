// A training step's time by what it was spent on, for `ndtrain bench train --profile`:
// the kernels by op class (kernels/op_class.h, timed at the dispatch seam:
// kernels/profile.h), the time in communication (the mesh's communicators' counters:
// blocked, and driving non-blocking operations) and at the end-of-step barrier (waiting for the slowest rank), and the rest
// of the step, unaccounted: host code between kernels, loops that do not go through
// the dispatch (gradient-norm, fp8 scaling, the ring reduce-scatter's sums), allocation.
// OpenMP barrier waits inside a kernel count to that kernel's class: a class that two
// threads do not speed up shows them (docs/performance.md compares 1 and 2 threads).
#pragma once

#include "kernels/profile.h"

#include <memory>
#include <string>
#include <vector>

namespace ndt {

class Communicator;
struct CommStats;
class DeviceMesh;

struct StepProfile {
  int rank = 0;  // the world rank whose step this is
  double step_seconds = 0;
  kernels::OpSeconds kernels{};  // per op class
  double communication = 0;      // blocked in the collectives and point-to-point calls, and driving
                                 // non-blocking ones (their starts and polls: CommCounter::progress_seconds)
  double rank_wait = 0;          // blocked in barriers (the end-of-step one: the slowest rank)
  // What no timer saw: step_seconds minus everything above.
  double unaccounted() const;
};

// The profile of the rank that spent the longest in kernels this step (the lowest such
// rank on a tie), on every rank of `comm`: the straggler whose pace the others wait for
// at their collectives. Its kernels are what the planner prices (the calibration keeps
// the slowest rank's figures: plan/calibration.h), and its communication is the
// collectives' own time, with less of the waiting that a faster rank's carries (2-rank
// runs of the development VM: rank 0's communication read a median 38-120% above the
// model's). Collective over `comm`; `local` is this rank's.
StepProfile slowest_rank_profile(const StepProfile& local, Communicator& comm);

// A communicator's time in communication: blocked in its calls other than barriers, and
// driving its non-blocking ones (CommCounter::progress_seconds).
double communication_seconds(const CommStats& stats);

// Measures steps on this rank: begin() before a step, end(step time) after. Turns the
// kernel timers on for its lifetime (one profiler at a time).
class StepProfiler {
 public:
  explicit StepProfiler(DeviceMesh& mesh);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  void begin();
  StepProfile end(double step_seconds) const;  // this rank's
  // The step's slowest rank's profile (slowest_rank_profile), exchanged on the profiler's
  // own communicator, so that the mesh's counters stay the step's; collective.
  StepProfile end_slowest(double step_seconds);

 private:
  double seconds_in(bool barriers) const;  // blocked so far on every communicator of the mesh

  std::vector<const Communicator*> communicators_;  // each once (mesh axes share objects)
  std::unique_ptr<Communicator> exchange_;          // the world's ranks, for end_slowest
  kernels::OpSeconds kernels_at_begin_{};
  double communication_at_begin_ = 0, rank_wait_at_begin_ = 0;
};

// The step of median time (the upper middle) as a table: one line per class with
// seconds and share of the step, communication, barriers and the unaccounted rest; the
// lines are indented by `indent`. Steps must not be empty.
std::string format_step_profile(const std::vector<StepProfile>& steps, const std::string& indent);

}  // namespace ndt
