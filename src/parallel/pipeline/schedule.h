// Pipeline schedules as data. Splits nothing and communicates nothing itself: it
// decides the order of work and communication of the pp axis, as one list of actions
// per rank that an executor runs and the simulator (parallel/pipeline/simulator.h)
// times.
//
// The model's units are split into pp x v contiguous chunks, numbered in model order
// (chunk 0 holds the embedding, the last chunk the head and loss). The placement puts
// them on ranks (PipelineShape::rank_of): in a loop, chunk c on rank c % pp, so rank r
// holds chunks r, r + pp, ..., r + (v - 1) pp; in a V (v = 2, the V schedules), rank r
// holds chunks r and 2 pp - 1 - r, so rank 0 holds the first and the last chunk and
// rank pp - 1 the two middle ones. A micro-batch passes every chunk forward in
// ascending order, then every chunk backward in descending order. Between chunks on
// different ranks the boundary tensor travels: its activation forward (SendActivation
// on the producer, RecvActivation on the consumer) and its gradient backward
// (SendGradient, RecvGradient). Between chunks on one rank (pp = 1, or chunks pp - 1
// and pp in a V) nothing is sent.
//
// Schedules (PipelineShape{pp, v, m}):
//   gpipe             every forward, then every backward in reverse micro-batch order.
//                     Holds m micro-batches' activations.
//   1f1b              rank r: pp - r - 1 warm-up forwards, then one forward and one
//                     backward in turn, then the remaining backwards. Holds at most pp.
//   interleaved_1f1b  Megatron's virtual pipeline: v >= 2 chunks per rank, micro-batches
//                     in groups of pp (m must be a multiple of pp), warm-up of
//                     2 (pp - r - 1) + (v - 1) pp chunk-forwards. Bubble divided by v.
//   zb_h1             zero bubble (Qi et al. 2023, handcrafted H1): 1f1b's order with each
//                     backward split into BackwardInput (the gradient the previous rank
//                     waits for) and BackwardWeight; rank r defers r weight passes and
//                     runs them at the end, in the bubble. Same activation peak as 1f1b
//                     (pp); rank 0 defers none, so it runs the fused Backward.
//   zb_v              zero bubble V (Qi et al. 2024, section 6): V placement, split
//                     backward; each rank warms up on its first chunk, then runs a
//                     forward, BackwardInput and BackwardWeight of one chunk in turn
//                     with the other's. Holds at most pp micro-batches' activations of a
//                     stage's size (2 pp chunk-activations of half a stage).
//   dualpipev         DeepSeek's DualPipeV (DualPipe cut in half): V placement, 8 phases
//                     per rank whose middle pairs the forward of one micro-batch with the
//                     backward of another (F&B; on a CPU one after the other, F then B),
//                     split backward only where it fills a bubble.
//   seq1f1b           Seq1F1B (Sun et al. 2024): each micro-batch cut into k sequence
//                     chunks, units of work of T / k tokens in 1f1b's order
//                     (parallel/pipeline/seq1f1b.h); a micro-batch's sequence chunks pass
//                     every pipeline chunk forward in ascending and backward in
//                     descending order. Holds at most pp + k - 1 units of 1 / k.
// gpipe, 1f1b, zb_h1 and seq1f1b run one chunk per rank (v = 1); zb_v and dualpipev two
// (parallel.pp_virtual_stages = 2, asked for explicitly like interleaved_1f1b's v, so
// that parallel.pp_layers and the run header mean the same under every schedule). All but
// seq1f1b run one sequence chunk (k = 1).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ndt {

enum class PipelineSchedule { gpipe, one_f_one_b, interleaved_1f1b, zb_h1, zb_v, dualpipev, seq1f1b };

// The names of parallel.pp_schedule and the CLI: "gpipe", "1f1b", "interleaved_1f1b", "zb_h1",
// "zb_v", "dualpipev", "seq1f1b".
std::string_view pipeline_schedule_name(PipelineSchedule schedule);
// Throws ndt::Error naming parallel.pp_schedule, the value and the choices.
PipelineSchedule pipeline_schedule_from_name(std::string_view name);
std::vector<std::string> pipeline_schedule_names();

// Where the chunks live (see the top of this file).
enum class PipelinePlacement { loop, v };
// The placement a schedule runs with: v for zb_v and dualpipev, else loop.
PipelinePlacement pipeline_placement(PipelineSchedule schedule);

struct PipelineShape {
  int pp = 1;  // ranks on the pp axis
  int v = 1;   // chunks (virtual stages) per rank
  int m = 1;   // micro-batches per step
  int seq_chunks = 1;  // k: sequence chunks per micro-batch (seq1f1b), each a unit of work
  PipelinePlacement placement = PipelinePlacement::loop;
  int chunks() const { return pp * v; }
  int rank_of(int chunk) const {
    if (placement == PipelinePlacement::v && chunk >= pp) return 2 * pp - 1 - chunk;
    return chunk % pp;
  }
  // Which of its rank's chunks `chunk` is: 0 for the first (in model order), ...
  int local_index(int chunk) const { return chunk / pp; }
  // The chunks of `rank`, in model order.
  std::vector<int> chunks_of(int rank) const;
};
// The shape of a schedule: its placement with these sizes.
PipelineShape pipeline_shape(PipelineSchedule schedule, int pp, int v, int m, int seq_chunks = 1);

// Throws ndt::Error naming the setting and value when the schedule cannot run this
// shape: pp, v or m below 1, v != 1 outside interleaved_1f1b and the V schedules, v < 2
// or m not a multiple of pp for interleaved_1f1b, v != 2 for the V schedules, a
// placement that is not the schedule's, k < 2 for seq1f1b or k != 1 outside it.
void check_pipeline_shape(PipelineSchedule schedule, const PipelineShape& shape);
// The most (micro-batch, chunk) pairs a step's schedule may hold, pp x v x m (x k): the action
// lists (a few actions per pair on every rank) stay within memory and a step's
// simulation within a second; a step of 64 stages of 4 chunks runs 4096 micro-batches.
inline constexpr int64_t kMaxPipelinePairs = int64_t{1} << 20;

enum class PipelineActionKind {
  forward,          // Forward(mb, chunk)
  backward,         // Backward(mb, chunk): input and weight gradients together
  backward_input,   // zero bubble: the gradient of the chunk's input only
  backward_weight,  // zero bubble: the chunk's weight gradients, after its backward_input
  send_activation,  // the output of Forward(mb, chunk) to the rank of chunk + 1
  recv_activation,  // the input of Forward(mb, chunk) from the rank of chunk - 1
  send_gradient,    // the input gradient of Backward(mb, chunk) to the rank of chunk - 1
  recv_gradient,    // the output gradient for Backward(mb, chunk) from the rank of chunk + 1
};

struct PipelineAction {
  PipelineActionKind kind = PipelineActionKind::forward;
  int micro_batch = 0;
  int chunk = 0;  // always a chunk of the rank that runs the action
  int peer = -1;  // communication: the other rank; compute: -1
  int seq_chunk = 0;  // seq1f1b: the micro-batch's sequence chunk (0 otherwise)
  bool operator==(const PipelineAction&) const = default;
};

bool is_communication(PipelineActionKind kind);
// "Forward(mb 3, chunk 1)", "RecvGradient(mb 0, chunk 2, from rank 3)"; a sequence chunk
// other than 0 follows the micro-batch: "Forward(mb 3 seq 1, chunk 1)".
std::string describe(const PipelineAction& action);

// The same number on a send and its matching receive, distinct for every boundary
// tensor of a step (usable as an MPI tag): direction, micro-batch, sequence chunk and
// the chunk that receives. Only for communication actions.
int pipeline_message_id(const PipelineAction& action, const PipelineShape& shape);

// The ordered actions of one rank (after check_pipeline_shape). Each receive comes
// immediately before the compute action that needs it, each send immediately after
// the action that produced it.
std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, const PipelineShape& shape, int rank);
std::vector<std::vector<PipelineAction>> pipeline_actions_of_all_ranks(PipelineSchedule schedule,
                                                                       const PipelineShape& shape);

// The most micro-batches (seq1f1b: (micro-batch, sequence chunk) units) whose context
// one rank holds at once running `actions`: a micro-batch's context lives from the first action that touches it to the last, as
// PipelineRunner takes and returns them. With v = 1 that is the peak of live activations;
// under interleaving more than (micro-batch, chunk) pairs / v, since one context serves a
// micro-batch from its first chunk's forward to its last chunk's backward (pp 4, v 2, m 8:
// 8 contexts on rank 0, not ceil(11 / 2) = 6).
int peak_live_contexts(const std::vector<PipelineAction>& actions);

// Runs all ranks' lists against each other: sends are eager (never wait), a receive
// waits until its matching send has run. Calls step(rank, index) for every action in
// an order that respects this. Throws ndt::Error on a deadlock (no rank can progress
// while some have actions left), naming what each waiting rank waits for, and on a
// receive that has already been matched.
void replay_pipeline_actions(const std::vector<std::vector<PipelineAction>>& ranks, const PipelineShape& shape,
                             const std::function<void(int rank, size_t index)>& step);

// Throws ndt::Error naming what is wrong with the lists of all ranks: an action on a
// chunk the rank does not hold or a micro-batch out of range; a micro-batch that does
// not pass every chunk forward exactly once and then backward exactly once (Backward,
// or BackwardInput then BackwardWeight), forward in ascending and backward in
// descending chunk order; a send or receive without exactly one match, with a wrong
// peer, or between chunks of one rank; another backward or gradient receive between the
// backward passes of one micro-batch through two neighbouring chunks of one rank (the
// gradient between them waits in the model's workspace, parallel/pipeline/runner.h); a
// deadlock. With sequence chunks (k > 1) also: a sequence chunk out of range, a
// micro-batch's sequence chunks passing a chunk forward out of ascending or backward out
// of descending order, or a backward of one micro-batch on a chunk while another's
// sequence chunks are part-way through theirs (the runner keeps one micro-batch's
// key/value gradient sums per rank).
void check_pipeline_actions(const std::vector<std::vector<PipelineAction>>& ranks, const PipelineShape& shape);
// check_pipeline_shape, then check_pipeline_actions on the generated lists.
void check_pipeline_schedule(PipelineSchedule schedule, const PipelineShape& shape);

}  // namespace ndt
