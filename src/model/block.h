// One transformer block, a unit (model/unit.h) with explicit forward and backward:
//   x_mid = x + Wo · attention(norm1(x))        (q, k, v projections; QK-norm; RoPE)
//   x_out = x_mid + MLP(norm2(x_mid))           (GELU 4x for gpt2, SwiGLU for llama)
// It saves what backward needs in the context's BlockActivations. Under tensor
// parallelism each rank computes its own heads and MLP hidden units between the region
// operators (model/tensor_parallel_regions.h); with sequence parallel the residual
// stream, the norms and the residual adds hold rows / tp rows and the regions all rows.
#pragma once

#include "model/config.h"
#include "model/parameter.h"
#include "model/tp_layers.h"
#include "model/unit.h"

#include <string>
#include <vector>

namespace ndt {

// Parameter specs of block `layer` (unit 1 + layer), in a fixed order.
std::vector<ParameterSpec> block_parameter_specs(const ModelConfig& c, int layer);

class Block : public Unit {
 public:
  Block(const ModelConfig& config, int layer, const ParameterStore& store, Workspace& workspace);

  // ctx.stream[layer + 1] = block(ctx.stream[layer]).
  void forward(MicroBatchContext& ctx) override;
  // workspace.dstream: dL/dx_out in, dL/dx_in out.
  void backward(MicroBatchContext& ctx, ModelHooks* hooks) override;
  void bind(const TensorParallelRegions& tp) override;

 private:
  const Parameter* find(const ParameterStore& store, const std::string& suffix, bool required = true);
  const ModelConfig& c_;
  int layer_;
  std::string prefix_;
  Workspace& ws_;
  const TensorParallelRegions* tp_ = nullptr;
  const Parameter *ln1_w_, *ln1_b_, *ln2_w_, *ln2_b_;
  ColumnParallelLinear wq_, wk_, wv_, fc_, up_;  // fc = gate for llama
  RowParallelLinear wo_, proj_;                  // proj = down for llama
  const Parameter *q_norm_, *k_norm_;
  PartialGradients partial_;
};

}  // namespace ndt
