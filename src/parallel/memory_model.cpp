#include "parallel/memory_model.h"

#include "core/error.h"

#include <algorithm>

namespace ndt {

ModelStateBytes predict_model_states(const std::vector<ParameterSpec>& specs, int dp_shard, int zero_stage,
                                     DType compute, int ep) {
  NDT_CHECK(dp_shard >= 1, "dp_shard = {} must be at least 1", dp_shard);
  NDT_CHECK(zero_stage >= 0 && zero_stage <= 3, "zero_stage = {} has no memory model (0 to 3)", zero_stage);
  NDT_CHECK(ep >= 1, "ep = {} must be at least 1", ep);
  NDT_CHECK(zero_stage == 0 || dp_shard % ep == 0,
            "ep = {} does not divide dp_shard = {}: ZeRO stage {} shards the experts over dp_shard / ep ranks", ep,
            dp_shard, zero_stage);
  // full: this rank's parameters (E / ep experts); shard: its padded shards of them;
  // the same of the trainable ones (frozen parameters have no gradients or moments).
  int64_t full = 0, shard = 0, trainable_full = 0, trainable_shard = 0;
  for (const ParameterSpec& s : specs) {
    const int split = s.expert ? ep : 1, n = zero_stage == 0 ? 1 : dp_shard / split;
    const int64_t numel = shape_numel(s.logical_shape) / split;
    const int64_t rows = s.logical_shape.empty() ? 1 : s.logical_shape[0] / split;
    const int64_t row_numel = rows == 0 ? 0 : numel / rows;
    const int64_t shard_numel = (rows + n - 1) / n * row_numel;
    full += numel;
    shard += shard_numel;
    if (s.frozen) continue;
    trainable_full += numel;
    trainable_shard += shard_numel;
  }
  ModelStateBytes m;
  m.params = 4 * (zero_stage >= 3 ? shard : full);
  if (compute != DType::f32 && zero_stage < 3) m.params += static_cast<int64_t>(dtype_size(compute)) * full;
  m.grads = 4 * (zero_stage >= 2 ? trainable_shard : trainable_full);
  m.optimizer = 8 * (zero_stage >= 1 ? trainable_shard : trainable_full);
  return m;
}

ModelStateBytes model_states_from_count(int64_t num_params, int dp_shard, int zero_stage,
                                        const ModelStateAccounting& bytes) {
  NDT_CHECK(dp_shard >= 1, "dp_shard = {} must be at least 1", dp_shard);
  ModelStateBytes m;
  m.params = zero_stage >= 3 ? bytes.params * num_params / dp_shard : bytes.params * num_params;
  m.grads = zero_stage >= 2 ? bytes.grads * num_params / dp_shard : bytes.grads * num_params;
  m.optimizer = zero_stage >= 1 ? bytes.optimizer * num_params / dp_shard : bytes.optimizer * num_params;
  return m;
}

int64_t predict_pipeline_activation_bytes(const ModelConfig& config, int B, int T, int loss_chunk_rows,
                                          const ActivationLayout& tp, const std::vector<char>& local_units,
                                          int contexts, int seq_chunks) {
  ActivationLayout layout = tp;
  layout.seq_chunks = seq_chunks;
  const int chunk = T / seq_chunks;
  int64_t floats = contexts * context_floats(config, layout, B, chunk, {}, local_units) +
                   workspace_floats(config, layout, B, chunk, loss_chunk_rows);
  if (seq_chunks > 1) {
    for (int l = 0; l < config.n_layer; ++l) {
      if (local_units.empty() || local_units[static_cast<size_t>(l) + 1]) {
        floats += sequence_chunk_sum_floats(config, layout, B, chunk, seq_chunks);
      }
    }
  }
  return floats * 4;
}

int largest_batch_in_budget(const ModelConfig& config, int T, int loss_chunk_rows, const ActivationLayout& tp,
                            const ActivationCheckpointing& policy, int64_t model_state_bytes, double budget_bytes) {
  int fits = 0;
  for (int b = 1; b <= 4096; ++b) {
    const int64_t bytes = model_state_bytes + Transformer::predict_activation_bytes(config, b, T, loss_chunk_rows, tp, policy);
    if (static_cast<double>(bytes) > budget_bytes) break;
    fits = b;
  }
  return fits;
}

int peak_deferred_weight_halves(const std::vector<PipelineAction>& actions) {
  int pending = 0, peak = 0;
  for (const PipelineAction& a : actions) {
    if (a.kind == PipelineActionKind::backward_input) peak = std::max(peak, ++pending);
    if (a.kind == PipelineActionKind::backward_weight) --pending;
  }
  return peak;
}

}  // namespace ndt
