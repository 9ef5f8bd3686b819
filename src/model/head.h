// The head unit (the last unit): final norm, output layer and cross-entropy loss. The
// output layer is fused with the loss and streamed over chunks of rows: a chunk's
// logits are computed, turned into loss and gradient in place and back-propagated at
// once, so at most chunk x vocab (/ tp) logits exist. That fusion decides where the
// work happens: in training the head's forward runs the final norm only and its
// backward computes the logits, the loss (ctx.loss_sum) and the gradients; in a
// forward-only context with targets the forward computes the loss.
#pragma once

#include "model/config.h"
#include "model/parameter.h"
#include "model/tp_layers.h"
#include "model/unit.h"

namespace ndt {

class Head : public Unit {
 public:
  Head(const ModelConfig& config, const ParameterStore& store, Workspace& workspace);
  void forward(MicroBatchContext& ctx) override;
  // Writes workspace.dstream = dL/d(its input) (and ctx.loss_sum).
  void backward(MicroBatchContext& ctx, ModelHooks* hooks) override;
  void bind(const TensorParallelRegions& tp) override;

  // The logits [vocab] of row `row` of a context whose forward has run (collective over
  // tp: the vocabulary slices are all-gathered).
  void row_logits(const MicroBatchContext& ctx, int64_t row, float* logits) const;

 private:
  // Streams the output layer over row chunks; with grad_scale != 0 also back-propagates.
  // Returns the summed token loss.
  double output_layer_and_loss(MicroBatchContext& ctx, float grad_scale);
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
};

}  // namespace ndt
