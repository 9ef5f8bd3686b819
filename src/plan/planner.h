// The layout planner behind `ndtrain plan`: for a model, a run (sequence length, global
// batch, precision) and a cluster, it enumerates the layouts ndtrain can run (pp,
// dp_replicate, dp_shard, cp, tp, ep; ZeRO stage; sequence parallel; cp mode;
// micro-batch; recompute; pipeline schedule), rejects those `ndtrain train` would refuse
// (RunConfig::validate_layout, the same checks) or that do not fit in memory, and scores
// the rest.
//
// Every prediction calls the function the tests hold to the measurement, so the planner
// has no formulas of its own for them:
//   model states      predict_model_states (parallel/memory_model.h), per pipeline stage
//   activations       Transformer::predict_activation_bytes x the micro-batches the
//                     schedule keeps in flight (pipeline simulator's peak_live_activations)
//   comm buffers      predict_comm_buffer_bytes (plan/comm_model.h)
//   offload           predict_tiered_states (parallel/offload_model.h): resident peaks, disk, I/O
//   bytes per axis    predict_step_communication (plan/comm_model.h)
//   FLOPs             unit_flops_per_token, unit_expert_flops_per_token, unit_recompute_flops_per_token
//                     (model/transformer.h)
//   bubble            simulate_pipeline (parallel/pipeline/simulator.h) at the textbook costs
// Step time is the planner's own model (docs/planner.md): a roofline per pipeline stage
// (matmul FLOPs at peak x gemm_efficiency, plus the activations' memory traffic at the
// memory bandwidth), an alpha-beta time per collective on the link its group spans,
// and the overlap each axis has in ndtrain: tp, cp (Ulysses) and ep on the critical path;
// the ring's cp exchange behind the attention; gradient reductions behind the last
// backward; FSDP gathers behind compute; ZeRO-1/2's parameter all-gather after the step;
// offload's swap-file I/O at the profile's disk bandwidth, the optimizer's stream behind
// the update and parameter reads behind forward and backward (read ahead).
#pragma once

#include "comm/communicator.h"
#include "model/activations.h"
#include "plan/comm_model.h"
#include "plan/device_profile.h"
#include "train/config.h"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <functional>
#include <string>
#include <vector>

namespace ndt {

// Offload (docs/offload.md): nothing, the optimizer states, or FSDP's parameter and
// gradient shards too on disk. Planned where the device profile has a disk bandwidth.
enum class OffloadChoice { none, optimizer, params };
std::string_view offload_choice_name(OffloadChoice choice);     // "none", "optimizer", "params"
OffloadChoice offload_choice_from_name(std::string_view name);  // throws naming --offload and the choices

struct Layout;

// What the search tries besides the mesh (each a list of choices).
struct PlanSpace {
  std::vector<OffloadChoice> offloads = {OffloadChoice::none, OffloadChoice::optimizer, OffloadChoice::params};
  std::vector<int> zero_stages = {0, 1, 2, 3};
  std::vector<CheckpointMode> recompute = {CheckpointMode::none, CheckpointMode::selective, CheckpointMode::full};
  std::vector<int> micro_batch_sizes = {1, 2, 4, 8};  // sequences per micro-batch and rank
  std::vector<PipelineSchedule> pp_schedules = {PipelineSchedule::one_f_one_b, PipelineSchedule::interleaved_1f1b,
                                                PipelineSchedule::zb_h1,       PipelineSchedule::zb_v,
                                                PipelineSchedule::dualpipev,   PipelineSchedule::gpipe};
  int interleaved_stages = 2;     // pp_virtual_stages of interleaved_1f1b (zb_v and dualpipev: always 2)
  int max_tp = 0;                 // 0: one node's devices (tp across nodes is not searched)
  std::vector<CpMode> cp_modes = {CpMode::ring, CpMode::ulysses, CpMode::usp};  // usp: every cp_ulysses
  // Settings the search keeps (parallel.layout = "auto": those the config gives): a
  // candidate is tried only if `admits` it (empty: every one); `fixed` names them for
  // the messages ("parallel.tp = 2").
  std::function<bool(const Layout&)> admits;
  std::string fixed;
};

struct MemoryEstimate {
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0, comm_buffers = 0;
  int in_flight = 1;  // micro-batches whose activations are held at once
  int64_t disk = 0;   // offload: swap files (not memory; not in total())
  int64_t total() const { return params + grads + optimizer + activations + comm_buffers; }
};

struct TimeEstimate {
  double compute_s = 0;    // matmuls and memory traffic of the forward, backward and recompute
  // compute_s by the kernels' classes (what train.profile measures): the matmuls (with
  // recompute's), the attention core, and the kernels between them (norms, activations,
  // residual adds) with ZeRO/FSDP's per-micro-batch copies.
  double matmul_s = 0, attention_s = 0, memory_s = 0;
  double exposed_comm_s = 0;
  std::array<double, kNumAxes> comm_s{};     // each axis's collectives at their alpha-beta time
  double bubble_s = 0;
  double optimizer_s = 0;      // the update, with ZeRO-1/2's once-a-step copies (step_copies_s)
  double step_copies_s = 0;
  double offload_io_s = 0;  // swap-file transfers the step waits for (what compute does not hide)
  double step_s = 0;
};

// One candidate: the settings of a run that decide its layout.
struct Layout {
  MeshShape mesh;  // dp_replicate resolved
  int zero_stage = 0;
  bool sequence_parallel = false;
  CpMode cp_mode = CpMode::ring;
  int micro_batch_size = 1;
  CheckpointMode recompute = CheckpointMode::none;
  PipelineSchedule pp_schedule = PipelineSchedule::one_f_one_b;
  int pp_virtual_stages = 1;
  OffloadChoice offload = OffloadChoice::none;

  static Layout of(const RunConfig& config);  // config.mesh as given
  RunConfig apply(RunConfig base) const;      // base with these settings (pp_layers: balanced)
  std::string describe() const;  // "pp4 dp_shard16 tp8 +sp | zero1 | mb1 | selective | 1f1b | offload optimizer"
};

struct LayoutScore {
  Layout layout;
  std::string rejected;  // empty: valid and fits; else why not
  bool invalid = false;  // rejected by ndtrain's checks (not for memory)
  int worst_stage = 0;   // the pipeline stage with the most memory
  MemoryEstimate memory; // of worst_stage
  std::vector<MemoryEstimate> stages;  // every pipeline stage's
  std::array<OpVolume, kNumAxes> comm{};  // worst_stage's step, per axis (all ops summed)
  TimeEstimate time;
  double bubble = 0;     // fraction of the step
  double mfu = 0, hfu = 0, tokens_per_s = 0;
};

// Scores one layout (config's mesh and settings) on the cluster; throws what `ndtrain
// train` would for an invalid layout. Out of memory is not an error: `rejected` says which
// component overflows and by how much.
LayoutScore score_layout(const RunConfig& config, const Cluster& cluster);

// Bytes one MoE block moves per micro-batch through buffers it makes and consumes itself
// (model/moe.cpp), which the stored activations behind memory_s's 3x leave out. With N
// `tokens` (one micro-batch's on the rank), S = N x k routed rows and R expert-side rows
// (S x `load`, the experts' load, under ep; S without), rows of width C, in floats: the
// dispatch's gather (2SC) and the combine (SC + NC) forward; the combine's and the
// gather-add's gradients (3SC + 3NC) backward; under ep the regrouping copies between the
// all-to-all's order and the experts' (2RC each way, forward and backward); backward's
// zeroed gradient buffers (RC, and RF for each of the experts' hidden, activation and up
// gradients, F their tp slice). The llama-moe ep run of `plan --validate` spent 4.7 ms a
// step more in elementwise kernels and 2.5 ms more unaccounted than the dense llama tp
// run beside it; this counts 7.2 ms (docs/planner.md).
double moe_dispatch_bytes(const ModelConfig& model, const MeshShape& m, double tokens, double load);

struct PlanResult {
  std::vector<LayoutScore> layouts;  // every candidate; the fitting ones first, fastest first
  int64_t candidates = 0, invalid = 0, out_of_memory = 0, fitting = 0;
  double seconds = 0;
};

// base: the model and run (seq_len, batch_size, precision, loss_chunk_rows; its layout
// keys are replaced by each candidate's). Throws when no layout divides the model
// and batch at all, naming the sizes.
PlanResult plan_layouts(const RunConfig& base, const Cluster& cluster, const PlanSpace& space = {});

// Flattenings that are the same communicator as another axis and count the same calls:
// without cp, dp_shard_cp is dp_shard and dp_cp is dp; with ep = 1, edp is dp_cp and
// edp_shard is dp_shard_cp (comm/device_mesh.h).
bool is_alias_axis(Axis axis, const MeshShape& mesh);
// "64.3G" or "37.5M" (GiB, MiB).
std::string memory_text(double bytes);

// The table of the best `rows` fitting layouts, and a summary of the rejections.
std::string render_plan_table(const PlanResult& result, const Cluster& cluster, int rows);
nlohmann::json layout_json(const LayoutScore& score);
std::string plan_csv(const PlanResult& result);

}  // namespace ndt
