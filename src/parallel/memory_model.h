// Memory of model states per rank (fp32 parameters, gradients, AdamW moments) for a
// data-parallel layout, from the parameter shapes alone: what the ledger should show
// after a step, and what a planner can ask before any hardware exists.
//   DDP:     params 4 Psi, grads 4 Psi,     moments 8 Psi            = 16 Psi
//   stage 1: params 4 Psi, grads 4 Psi,     moments 8 Psi / n        = 8 Psi + 8 Psi / n
//   stage 2: params 4 Psi, grads 4 Psi / n, moments 8 Psi / n        = 4 Psi + 12 Psi / n
//   stage 3: params 4 Psi / n, grads 4 Psi / n, moments 8 Psi / n    = 16 Psi / n
// with n = dp_shard and every "/ n" counted exactly: each parameter's shard padded to
// ceil(rows / n) rows, as parallel/data/shard_layout.h lays it out. Psi counts the routed
// experts' parameters (ParameterSpec::expert) / ep: each rank holds E / ep experts
// (parallel/expert/expert_parallel.h), and ZeRO shards those over the dp_shard / ep ranks
// holding the same experts (edp_shard): for the experts, Psi_e / ep and n = dp_shard /
// ep, their shards padded to ceil((E / ep) / n) expert rows, e.g. stage 3
//   16 Psi_dense / dp_shard + 16 Psi_e / ep / (dp_shard / ep) = 16 (Psi_dense + Psi_e) / dp_shard.
// Low-precision compute (model/precision.h) adds the parameters' compute copy, 2 Psi
// (ledger tag params), wherever whole parameters are kept (DDP, stages 1 and 2); stage 3
// casts a group's copy when it gathers it and frees it with the group, so after a step
// it holds none. Gradients and the master weights stay fp32, so unlike the ZeRO paper's
// fp16 accounting (2 + 2 + 12 bytes) a bf16 run keeps 4 + 2 + 4 + 8 bytes per parameter
// before sharding.
// Frozen parameters (ParameterSpec::frozen: fine-tuning) count in params only: Psi in
// the grads and moments terms is the trainable parameters'.
//
// Split-backward pipeline schedules (zero-bubble) keep, besides the contexts, what each
// pending weight half reads (deferred_weight_bytes, model/activations.h: the linear
// layers' output gradients in fp32, and the inputs the context does not keep, by
// compute dtype and recompute policy): at most peak_deferred_weight_halves of them at
// once on a rank.
#pragma once

#include "model/parameter.h"
#include "model/transformer.h"
#include "parallel/pipeline/schedule.h"

#include <cstdint>
#include <vector>

namespace ndt {

struct ModelStateBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;
  int64_t total() const { return params + grads + optimizer; }
};

// specs: one tp rank's blocks (local_parameter_specs), the experts whole (all E).
// dp_shard: the ranks ZeRO shards over (dp_shard x cp), which ep divides.
ModelStateBytes predict_model_states(const std::vector<ParameterSpec>& specs, int dp_shard, int zero_stage,
                                     DType compute = DType::f32, int ep = 1);

// Activation bytes (ledger tag activations) a pipeline rank holds after a step: its pool
// of `contexts` contexts (the schedule's peak_live_contexts), each holding the units
// `local_units` flags (model/unit.h), and the workspace they share, for micro-batches of
// B rows of T tokens. Seq1F1B (seq_chunks = k > 1, parallel/pipeline/seq1f1b.h): a
// context holds T / k tokens and no attention probabilities, and the rank adds the
// key/value gradient sums of its blocks, (k - 1) x 2 x B x T / k x KD floats each.
int64_t predict_pipeline_activation_bytes(const ModelConfig& config, int B, int T, int loss_chunk_rows,
                                          const ActivationLayout& tp, const std::vector<char>& local_units,
                                          int contexts, int seq_chunks = 1);

// The most sequences of T tokens per rank (up to 4096) whose predicted memory, the
// model states plus one micro-batch's activations (Transformer::predict_activation_bytes
// with these settings), fits budget_bytes; 0 if not even one does.
int largest_batch_in_budget(const ModelConfig& config, int T, int loss_chunk_rows, const ActivationLayout& tp,
                            const ActivationCheckpointing& policy, int64_t model_state_bytes, double budget_bytes);

// The most weight halves a rank's action list leaves pending at once: (micro-batch,
// chunk) pairs between their BackwardInput and their BackwardWeight. 0 for a schedule
// that does not split backward.
int peak_deferred_weight_halves(const std::vector<PipelineAction>& actions);

// Bytes per parameter of each model state before sharding.
struct ModelStateAccounting {
  int64_t params = 4, grads = 4, optimizer = 8;
};
// ndtrain in fp32: 4 + 4 + 8 bytes (above).
inline constexpr ModelStateAccounting kFp32States{4, 4, 8};
// The ZeRO paper's mixed-precision Adam (Rajbhandari et al. 2020, section 3.1): fp16
// parameters and gradients, and K = 12 bytes of fp32 master weights, momentum and
// variance: 2 + 2 + 12. (ndtrain's bf16 runs keep 4 + 2, 4 and 8: see above.)
inline constexpr ModelStateAccounting kZeroPaperStates{2, 2, 12};

// The same from the parameter count alone (no padding): the textbook formulas above,
// with the given bytes per parameter.
ModelStateBytes model_states_from_count(int64_t num_params, int dp_shard, int zero_stage,
                                        const ModelStateAccounting& bytes = kFp32States);

}  // namespace ndt
