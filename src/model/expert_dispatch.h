// The model's side of expert parallelism: the interface a mixture-of-experts layer
// (model/moe.h) calls to move routed token rows to the experts that process them and
// back, owned here so that the model includes nothing from parallel/ or comm/ (as with
// tensor and context parallelism). The base class is expert parallelism of size 1:
// this rank holds every expert and the rows stay where they are. parallelize()
// installs ExpertParallel (parallel/expert/expert_parallel.h), an all-to-all-v over the ep
// mesh axis.
//
// Two layouts of the same routed rows (one row per kept (token, expert) assignment):
//   token side:  this rank's assignments grouped by global expert 0 .. E-1, in the
//                order the MoE layer chose (send_counts[e] rows for expert e);
//   expert side: the rows this rank's experts process, grouped by local expert, and
//                within an expert by source ep rank 0 .. ep-1 (recv_counts[src][le]
//                rows from rank src for local expert le), so each expert's rows are
//                contiguous: one GEMM per expert.
// Rank r of ep holds the global experts [r x E / ep, (r + 1) x E / ep).
#pragma once

#include <cstdint>
#include <vector>

namespace ndt {

// One micro-batch's routing through one MoE block, exchanged once in forward and kept
// for backward (which sends the gradients the same way, reversed).
struct ExpertRoute {
  int ep = 1, local_experts = 0;
  std::vector<int64_t> send_counts;  // [E] token side
  std::vector<int64_t> recv_counts;  // [ep x local_experts] expert side, [src][le]
  // The most expert-side rows any rank of the ep group processes: the rank the group's
  // next exchange waits for (ep = 1: this rank's expert_rows()).
  int64_t most_loaded_rows = 0;
  int64_t token_rows() const;        // the sum of send_counts
  int64_t expert_rows() const;       // the sum of recv_counts
  // Rows local expert le processes (summed over the sources).
  int64_t expert_count(int le) const;
};

class ExpertDispatch {
 public:
  virtual ~ExpertDispatch() = default;
  virtual int size() const { return 1; }
  virtual int rank() const { return 0; }
  // The experts this rank holds (E / size()) and the first of them.
  int local_experts(int n_experts) const { return n_experts / size(); }
  int first_expert(int n_experts) const { return rank() * local_experts(n_experts); }
  // Fills route.recv_counts and most_loaded_rows from route.send_counts (ep > 1:
  // exchanges the counts).
  virtual void plan(ExpertRoute& route) const;
  // Token side [token_rows, width] -> expert side [expert_rows, width] (written).
  virtual void to_experts(const ExpertRoute& route, const float* tokens, float* experts, int64_t width) const;
  // Expert side [expert_rows, width] -> token side [token_rows, width] (written).
  virtual void from_experts(const ExpertRoute& route, const float* experts, float* tokens, int64_t width) const;
};

}  // namespace ndt
