#include "train/memory_preflight.h"

#include "core/error.h"
#include "core/system_memory.h"
#include "model/transformer.h"

#include <algorithm>

namespace ndt {

namespace {

// Parameters of the experts and of everything else, in double.
std::pair<double, double> dense_and_expert_parameters(const ModelConfig& c) {
  const double C = c.d_model, Fe = c.expert_d_ff(), E = c.n_experts;
  const double moe_blocks = c.is_moe() ? c.n_layer / c.moe_every : 0;
  const double experts = moe_blocks * E * Fe * C * (c.arch == Arch::gpt2 ? 2 : 3);
  double dense = (c.tied_embeddings ? 1.0 : 2.0) * c.vocab_size * C + (c.arch == Arch::gpt2 ? c.max_seq_len * C : 0);
  for (int l = 0; l < c.n_layer; ++l) {
    const double F = c.mlp_d_ff(l), KD = static_cast<double>(c.kv_heads()) * c.head_dim();
    dense += 2 * C * C + 2 * C * KD + (c.arch == Arch::gpt2 ? 2.0 : 3.0) * C * F + (c.is_moe_block(l) ? E * C : 0);
  }
  return {dense, experts};
}

// The frozen parameters (train.freeze, LoRA's base weights) among the dense ones and the
// experts, in double; none without fine-tuning (no specs built for them).
std::pair<double, double> frozen_dense_and_expert_parameters(const ModelConfig& c) {
  double dense = 0, experts = 0;
  if (c.freeze.empty() && !c.lora.enabled()) return {dense, experts};
  for (const ParameterSpec& s : model_parameter_specs(c)) {
    if (s.frozen) (s.expert ? experts : dense) += static_cast<double>(shape_numel(s.logical_shape));
  }
  return {dense, experts};
}

// Bytes per frozen parameter a rank keeps in memory: its value (a shard under ZeRO-3, on
// disk under offload.params) and no gradient or moments.
double resident_frozen_bytes_per_parameter(const RunConfig& c, double n) {
  if (c.offload_params) return 0;
  return c.zero_stage >= 3 ? 4 / n : 4;
}

// Bytes per parameter of the model states (memory_model.h) a rank keeps in memory when it
// holds 1 / n of what ZeRO shards. Offloaded states live on disk (docs/offload.md): the
// moments under offload.optimizer; under offload.params the parameter and gradient shards
// too, of which only the units in flight are resident (no floor above zero).
double resident_state_bytes_per_parameter(const RunConfig& c, double n) {
  if (c.offload_params) return 0;
  const double moments = c.offload_optimizer ? 0 : 8;
  switch (c.zero_stage) {
    case 0: return 8 + moments;
    case 1: return 8 + moments / n;
    case 2: return 4 + (4 + moments) / n;
    default: return (8 + moments) / n;
  }
}

}  // namespace

RunMemoryFloor run_memory_floor(const RunConfig& config, const MeshShape& mesh) {
  const ModelConfig& c = config.model;
  RunMemoryFloor f;
  const auto [dense, experts] = dense_and_expert_parameters(c);
  // The busiest rank holds at least the average share of pp stages and tp blocks.
  const auto [frozen_dense, frozen_experts] = frozen_dense_and_expert_parameters(c);
  const double per_rank = static_cast<double>(mesh.pp) * mesh.tp, n = static_cast<double>(mesh.dp_shard) * mesh.cp;
  const double local = (dense + experts / mesh.ep) / per_rank;
  const double frozen = std::min(local, (frozen_dense + frozen_experts / mesh.ep) / per_rank);
  f.model_states = (local - frozen) * resident_state_bytes_per_parameter(config, n) +
                   frozen * resident_frozen_bytes_per_parameter(config, n);
  const double tokens = static_cast<double>(config.micro_batch_size) * config.seq_len;
  const double split = static_cast<double>(mesh.cp) * (config.sequence_parallel ? mesh.tp : 1);
  const double units = static_cast<double>(c.n_layer) / mesh.pp + 1;  // stream[u] of every unit of a stage
  f.batch = tokens * 2 * sizeof(int32_t) + units * tokens / split * c.d_model * sizeof(float);
  // Without context parallelism the attention kernel keeps its probabilities: at least
  // one block's, seq_len per token and head (a recomputing block's in the workspace).
  if (mesh.cp == 1) f.batch += tokens * config.seq_len * (static_cast<double>(c.n_head) / mesh.tp) * sizeof(float);
  return f;
}

void check_run_fits_in_memory(const RunConfig& config, const MeshShape& mesh, double machine_bytes) {
  if (machine_bytes <= 0) return;
  const RunMemoryFloor f = run_memory_floor(config, mesh);
  const ModelConfig& c = config.model;
  NDT_CHECK(f.model_states <= machine_bytes,
            "the model's parameters, gradients and AdamW moments need at least {} on one rank (model.n_layer = {}, "
            "model.d_model = {}, model.d_ff = {}, model.vocab_size = {}, model.n_experts = {}, model.moe_d_ff = {}; "
            "over parallel.pp = {} x tp = {}, parallel.zero_stage = {}): more than this machine's {} of memory",
            bytes_text(f.model_states), c.n_layer, c.d_model, c.d_ff, c.vocab_size, c.n_experts, c.moe_d_ff, mesh.pp,
            mesh.tp, config.zero_stage, bytes_text(machine_bytes));
  NDT_CHECK(f.model_states + f.batch <= machine_bytes,
            "one micro-batch of train.micro_batch_size = {} sequences of train.seq_len = {} tokens (train.batch_size = "
            "{} over {} data-parallel ranks) needs at least {} on one rank for its tokens, the residual stream of "
            "each of model.n_layer = {} blocks (model.d_model = {}) and a block's attention probabilities "
            "(model.n_head = {}, seq_len per token), and the model states {}: more than this machine's {} of memory",
            config.micro_batch_size, config.seq_len, config.batch_size, mesh.size(Axis::dp), bytes_text(f.batch),
            c.n_layer, c.d_model, c.n_head, bytes_text(f.model_states), bytes_text(machine_bytes));
}

}  // namespace ndt
