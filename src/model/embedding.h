// The embedding unit (unit 0): token embedding (vocab-parallel under tensor
// parallelism) plus, for gpt2, the learned positions. Writes ctx.stream[0] [Nl, C].
#pragma once

#include "model/config.h"
#include "model/parameter.h"
#include "model/tp_layers.h"
#include "model/unit.h"

namespace ndt {

class Embedding : public Unit {
 public:
  Embedding(const ModelConfig& config, const ParameterStore& store, Workspace& workspace);
  void forward(MicroBatchContext& ctx) override;
  // Consumes workspace.dstream = dL/d(ctx.stream[0]).
  void backward(MicroBatchContext& ctx, ModelHooks* hooks) override;
  void bind(const TensorParallelRegions& tp) override;

 private:
  // The positions of this rank's rows (sequence parallel: its block of the tokens).
  const int32_t* local_positions(const MicroBatchContext& ctx) const;

  const ModelConfig& c_;
  Workspace& ws_;
  const TensorParallelRegions* tp_ = nullptr;
  const Parameter* wte_;
  const Parameter* wpe_ = nullptr;
  // The positions' gradient is partial over tp under sequence parallel.
  PartialGradients positions_partial_;
};

}  // namespace ndt
