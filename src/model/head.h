// The head unit (the last unit): final norm, output layer and cross-entropy loss. The
// output layer is fused with the loss and streamed over chunks of rows: a chunk's
// logits are computed, turned into loss and gradient in place and back-propagated at
// once, so at most chunk x vocab (/ tp) logits exist. That fusion decides where the
// work happens: in training the head's forward runs the final norm only and its
// backward computes the logits, the loss (ctx.loss_sum) and the gradients; in a
// forward-only context with targets the forward computes the loss. With a z-loss
// coefficient c > 0 (set_z_loss) both also sum c x lse^2 over the tokens into
// ctx.z_loss_sum, and backward's gradient is that of ctx.grad_scale x (ctx.loss_sum +
// ctx.z_loss_sum); ctx.loss_sum stays the plain cross-entropy.
#pragma once

#include "model/config.h"
#include "model/parameter.h"
#include "model/tp_layers.h"
#include "model/unit.h"

#include <vector>

namespace ndt {

class Head : public Unit {
 public:
  Head(const ModelConfig& config, const ParameterStore& store, Workspace& workspace);
  void forward(MicroBatchContext& ctx) override;
  // Writes workspace.dstream = dL/d(its input) (and ctx.loss_sum, ctx.z_loss_sum).
  void backward(MicroBatchContext& ctx, ModelHooks* hooks) override;
  void bind(const TensorParallelRegions& tp) override;

  // The z-loss coefficient (0: none). Validated by Transformer::set_z_loss.
  void set_z_loss(float coefficient) { z_loss_ = coefficient; }
  float z_loss() const { return z_loss_; }

  // The logits [vocab] of row `row` of a context whose forward has run (collective over
  // tp: the vocabulary slices are all-gathered).
  void row_logits(const MicroBatchContext& ctx, int64_t row, float* logits) const;

 private:
  // Streams the output layer over row chunks; with grad_scale != 0 also back-propagates.
  // Sets ctx.loss_sum and ctx.z_loss_sum.
  void output_layer_and_loss(MicroBatchContext& ctx, float grad_scale);
  const Parameter& weight() const { return lm_head_ ? *lm_head_ : *wte_; }

  const ModelConfig& c_;
  Workspace& ws_;
  const TensorParallelRegions* tp_ = nullptr;
  const Parameter* wte_;  // the output layer when embeddings are tied
  const Parameter* lnf_w_;
  const Parameter* lnf_b_ = nullptr;
  const Parameter* lm_head_ = nullptr;
  // The final norm's gradients are partial over tp under sequence parallel.
  PartialGradients final_norm_partial_;
  float z_loss_ = 0.0f;
  std::vector<float> z_losses_;  // [chunk] one chunk's z terms (z_loss_ > 0 only; outside the ledger)
};

}  // namespace ndt
