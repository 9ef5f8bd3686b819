// The model is a sequence of units: Embedding (unit 0), Block x n_layer (units 1 ..
// n_layer), Head (the last: final norm, output layer and loss). Each has a forward and
// a backward over a micro-batch's context (model/activations.h), which the caller owns,
// one per micro-batch in flight: a schedule may run forward A, forward B, backward B,
// backward A and get the same gradients as A then B. A pipeline stage runs a range of
// units; activation checkpointing drops and rebuilds one unit's saved tensors;
// attention or MLP variants swap a block's inside.
//
// Data flow between units is the residual stream: unit u reads ctx.stream[u - 1] and
// writes ctx.stream[u] (the embedding reads the tokens, the head writes the losses).
// Backward flows through the workspace's dstream: the head writes dL/d(its input),
// each block turns dL/d(output) into dL/d(input) in place, the embedding consumes it.
// Parameter gradients are added (+=), so micro-batches accumulate.
//
// Zero-bubble schedules split a backward into its input-gradient half (what the
// previous unit, or pipeline stage, waits for) and its weight-gradient half (which can
// wait): backward_input then backward_weight adds exactly the gradients backward adds.
// Blocks split their linear layers' weight gradients off, keeping what they need in the
// context; the embedding and the head do all of their backward in the input half.
#pragma once

#include "model/activations.h"
#include "model/hooks.h"
#include "model/tensor_parallel_regions.h"

namespace ndt {

class Unit {
 public:
  virtual ~Unit() = default;
  virtual void forward(MicroBatchContext& ctx) = 0;
  // hooks (may be null): poll() is called between kernels.
  virtual void backward(MicroBatchContext& ctx, ModelHooks* hooks) = 0;
  virtual void backward_input(MicroBatchContext& ctx, ModelHooks* hooks) { backward(ctx, hooks); }
  virtual void backward_weight(MicroBatchContext& ctx, ModelHooks* hooks) {}
  // The tensor-parallel regions to call from now on (the identity until parallelize()
  // installs others); the parameters' placements are final by then.
  virtual void bind(const TensorParallelRegions& tp) = 0;
};

}  // namespace ndt
