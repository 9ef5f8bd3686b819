#include "model/embedding.h"

#include "core/error.h"
#include "kernels/kernels.h"

namespace ndt {

Embedding::Embedding(const ModelConfig& config, const ParameterStore& store, Workspace& workspace)
    : c_(config), ws_(workspace), wte_(&store.get("wte.weight")) {
  if (c_.arch == Arch::gpt2) wpe_ = &store.get("wpe.weight");
}

void Embedding::bind(const TensorParallelRegions& tp) {
  tp_ = &tp;
  positions_partial_ = PartialGradients(tp, {wpe_});
}

const int32_t* Embedding::local_positions(const MicroBatchContext& ctx) const {
  return ctx.positions.data() + (tp_->splits_rows() ? tp_->rank() * tp_->local_rows(ctx.rows()) : 0);
}

void Embedding::forward(MicroBatchContext& ctx) {
  ws_.fit(ctx);
  const int64_t N = ctx.rows(), Nl = tp_->local_rows(N), C = c_.d_model;
  for (int64_t i = 0; i < N; ++i) {
    NDT_CHECK(ctx.inputs[i] >= 0 && ctx.inputs[i] < c_.vocab_size,
              "token {} at position {} is outside the vocabulary [0, {})", ctx.inputs[i], i, c_.vocab_size);
  }
  float* out = ctx.stream[0];
  // The vocab-parallel lookup is summed over tp like a row-parallel output.
  vocab_parallel_embedding_forward(*tp_, *wte_, ctx.inputs.data(), out, tp_->splits_rows() ? ws_.block.dln : out, N,
                                   C);
  if (wpe_) {
    kernels::embedding_forward(out, local_positions(ctx), wpe_->data(), static_cast<int>(Nl), static_cast<int>(C),
                               /*accumulate=*/true);
  }
}

void Embedding::backward(MicroBatchContext& ctx, ModelHooks* hooks) {
  ws_.fit(ctx);
  const int64_t N = ctx.rows(), Nl = tp_->local_rows(N), C = c_.d_model;
  vocab_parallel_embedding_backward(*tp_, *wte_, ctx.inputs.data(), ws_.dstream, ws_.block.dout_full, N, C);
  if (wpe_ && wpe_->trainable()) {
    positions_partial_.begin();
    kernels::embedding_backward(positions_partial_.grad(wpe_), ws_.dstream, local_positions(ctx),
                                static_cast<int>(Nl), static_cast<int>(C));
    positions_partial_.finish();
  }
}

}  // namespace ndt
