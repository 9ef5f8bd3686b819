// Pipeline parallelism: runs this rank's chunks of the model (parallel/pipeline/stages.h)
// in the order of a schedule's action list (parallel/pipeline/schedule.h). It splits
// the layers over the pp axis and communicates, point to point on pp, each boundary
// tensor: the residual stream [local rows, d_model] forward (activation) and its
// gradient backward, a non-blocking send after the action that produced it and a
// receive right before the action that needs it. One context (model/activations.h)
// per micro-batch in flight, holding this rank's units' activations only, taken when
// the micro-batch's first forward runs here and given back after its last backward:
// the activation memory is the schedule's (GPipe m contexts, 1F1B at most pp).
// Seq1F1B (parallel/pipeline/seq1f1b.h): one context per (micro-batch, sequence chunk)
// unit, T / k tokens of each row, pointed at its micro-batch's earlier chunks' contexts,
// and one store of key/value gradient sums per rank (model/sequence_chunks.h), allocated
// with the first context: (k - 1) x 2 x N x KD floats per block of this rank.
// Between two neighbouring chunks on one rank (the two middle chunks of the V placement)
// nothing travels: the forward reads the context's stream slot the chunk before wrote,
// the backward the input gradient the chunk after left in the workspace, which the
// schedule's validation keeps from being overwritten in between.
// Gradients only accumulate here; the caller syncs them over data parallelism after
// the whole schedule.
#pragma once

#include "comm/communicator.h"
#include "model/transformer.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/simulator.h"
#include "parallel/pipeline/stages.h"

#include <array>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

namespace ndt {

// What the last train() took on this rank: its wall time, the time in compute actions,
// each compute action's seconds by kind (forward, backward, backward_input,
// backward_weight), for the measured bubble and the simulator's costs, and every
// action in its order with its start and end in seconds from the start of train()
// (a receive: from reaching it to its tensor's arrival; a send: posting it), for the
// measured timeline of `ndtrain report`.
struct PipelineStepTimes {
  double wall = 0;
  double busy = 0;
  std::array<std::vector<double>, 4> compute;
  std::vector<TimedPipelineAction> actions;
};

// The names of the action kinds in pipeline_timeline.json ("forward", "backward",
// "backward_input", "backward_weight", "send_activation", ..., as the enumerators);
// from_name throws ndt::Error naming the text and the choices.
std::string_view pipeline_action_kind_name(PipelineActionKind kind);
PipelineActionKind pipeline_action_kind_from_name(std::string_view name);

// The token-loss sums of a step or an evaluation over its micro-batches: the
// cross-entropy and the z-loss terms (Transformer::set_z_loss; 0 without). Only the
// rank holding the head computes them; the runner sums them over pp (as f32, one
// all-reduce of one value, or two with a z-loss), so every pp rank returns the same.
struct PipelineLosses {
  double loss_sum = 0;
  double z_loss_sum = 0;
};

class PipelineRunner : private ModelHooks {
 public:
  // hooks: called around each unit like run_forward_backward does (may be null).
  PipelineRunner(Transformer& model, Communicator& pp, PipelineSchedule schedule, const PipelineShape& shape,
                 PipelineStages stages, ModelHooks* hooks);

  // Fills a context with micro-batch `mb` (Transformer::prepare).
  using Prepare = std::function<void(int mb, MicroBatchContext& ctx, bool forward_only)>;
  // Forward and backward of the shape's m micro-batches; returns their token-loss sums.
  PipelineLosses train(const Prepare& prepare);
  // Forward only, micro-batch after micro-batch; the same return value.
  PipelineLosses evaluate(int micro_batches, const Prepare& prepare);

  // Contexts held at once in the last train(): micro-batches, or with sequence chunks
  // (micro-batch, sequence chunk) units.
  int peak_live_contexts() const { return peak_live_; }
  const PipelineStepTimes& last_step_times() const { return times_; }
  const PipelineStages& stages() const { return stages_; }
  const PipelineShape& shape() const { return shape_; }
  // Every pp rank's actions of its last train(), in pp rank order, each rank's times
  // from its own start of the step. Collective on pp (two all-gathers, counted on pp):
  // call it outside any step whose communication is checked, e.g. after the run.
  std::vector<std::vector<TimedPipelineAction>> gather_last_step_timeline();

 private:
  // The units get the runner as their hooks: poll() also tests the sends in flight, since
  // MPI moves a large message (rendezvous) only while its sender is inside an MPI call.
  void poll() override;
  // The context of an action's unit (micro-batch, sequence chunk), taken from the pool if new.
  MicroBatchContext& context(const PipelineAction& action);
  int unit_of(const PipelineAction& action) const { return action.micro_batch * shape_.seq_chunks + action.seq_chunk; }
  // Seq1F1B: points a new chunk's context at its micro-batch's earlier chunks and the sums.
  void link_sequence_chunk(MicroBatchContext& ctx, int mb);
  void release(int unit);
  void run(const PipelineAction& action);
  void forward(int chunk, MicroBatchContext& ctx);
  float* boundary(MicroBatchContext& ctx, int chunk, bool input);  // the chunk's input or output stream slot
  int64_t boundary_floats(const MicroBatchContext& ctx) const;
  int first_unit(int chunk) const { return stages_.first_unit[static_cast<size_t>(chunk)]; }
  int end_unit(int chunk) const { return stages_.first_unit[static_cast<size_t>(chunk) + 1]; }
  PipelineLosses sum_over_pp(PipelineLosses local);

  Transformer& model_;
  Communicator& pp_;
  PipelineSchedule schedule_;
  PipelineShape shape_;
  PipelineStages stages_;
  ModelHooks* hooks_;
  std::vector<PipelineAction> actions_;
  const Prepare* prepare_ = nullptr;
  std::vector<std::unique_ptr<MicroBatchContext>> free_;
  std::vector<std::unique_ptr<MicroBatchContext>> live_;  // [m x k], null when not live
  Tensor key_value_sums_;  // Seq1F1B's (ledger tag activations)
  int live_count_ = 0, peak_live_ = 0;
  PipelineLosses losses_;  // this rank's, over the step's micro-batches so far
  std::vector<WorkHandle> sends_;
  std::vector<Tensor> send_buffers_;  // gradients in flight (the workspace is reused)
  PipelineStepTimes times_;
};

}  // namespace ndt
