// One transformer block, a unit (model/unit.h) with explicit forward and backward:
//   x_mid = x + Wo · attention(norm1(x))        (q, k, v projections; QK-norm; RoPE)
//   x_out = x_mid + MLP(norm2(x_mid))           (GELU 4x for gpt2, SwiGLU for llama)
// In an MoE block (ModelConfig::is_moe_block) the MLP is the routed experts
// (model/moe.h) plus, when moe_shared_d_ff > 0, a shared MLP of that width (the
// block's mlp.* parameters) every token passes through; both outputs are summed before
// the row-parallel reduction. An MoE block runs its whole MLP backward in backward_input.
// It saves what backward needs in the context's BlockActivations, or, under activation
// checkpointing (model/activations.h), part of it, and recomputes the rest at the start
// of its backward. Under tensor
// parallelism each rank computes its own heads and MLP hidden units between the region
// operators (model/tensor_parallel_regions.h); with sequence parallel the residual
// stream, the norms and the residual adds hold rows / tp rows and the regions all rows.
#pragma once

#include "model/activations.h"
#include "model/config.h"
#include "model/context_parallel_attention.h"
#include "model/fused_projections.h"
#include "model/lora.h"
#include "model/moe.h"
#include "model/parameter.h"
#include "model/tp_layers.h"
#include "model/unit.h"

#include <array>
#include <string>
#include <utility>
#include <vector>

namespace ndt {

class LinearBackward;  // block.cpp: a linear layer's backward, fused or split

// Parameter specs of block `layer` (unit 1 + layer), in a fixed order.
std::vector<ParameterSpec> block_parameter_specs(const ModelConfig& c, int layer);

class Block : public Unit {
 public:
  Block(const ModelConfig& config, int layer, const ParameterStore& store, Workspace& workspace);

  // ctx.stream[layer + 1] = block(ctx.stream[layer]).
  void forward(MicroBatchContext& ctx) override;
  // workspace.dstream: dL/dx_out in, dL/dx_in out.
  void backward(MicroBatchContext& ctx, ModelHooks* hooks) override;
  // The same in two halves; the weight half runs the linear layers' weight and bias
  // gradients the input half left in the context (DeferredWeightHalf), reading the
  // layers' inputs from the context or, restored into the recompute area, from the
  // context's packed copies (low precision) and the copies the input half kept of what
  // the block recomputed (activation checkpointing): bitwise the fused backward's.
  void backward_input(MicroBatchContext& ctx, ModelHooks* hooks) override;
  void backward_weight(MicroBatchContext& ctx, ModelHooks* hooks) override;
  void bind(const TensorParallelRegions& tp) override;
  // The attention core's implementation (context parallelism; not owned).
  void bind_attention(const ContextParallelAttention& attention) { attention_ = &attention; }
  // Where the routed rows go (expert parallelism; not owned), and where the routing
  // totals of training forwards are added (not owned).
  void bind_experts(const ExpertDispatch& dispatch, MoeTotals* totals) { experts_ = &dispatch, moe_totals_ = totals; }

 private:
  const Parameter* find(const ParameterStore& store, const std::string& suffix, bool required = true);
  // Points the targeted linears at their adapters (lora.targets).
  void attach_adapters(const ParameterStore& store);
  BlockActivations activations(const MicroBatchContext& ctx) const;
  void norm(float* out, float* mean, float* rstd, const float* x, const Parameter& w, const Parameter* b,
            const BlockDims& d);
  void attention_core(const MicroBatchContext& ctx, const BlockActivations& a, const BlockDims& d);
  // The context's attention: the bound one if the context's sequences are split, else local.
  const ContextParallelAttention& attention(const MicroBatchContext& ctx) const;
  // The context's document starts for attention (null without document boundaries).
  static const int32_t* document_starts(const MicroBatchContext& ctx);
  void activation(const BlockActivations& a, const BlockDims& d);
  // The activation's backward: dff_a (its output gradient) -> dff_b (and dff_c, llama's up).
  void activation_backward(const BlockActivations& a, const BlockDims& d);
  // In low precision, x rounded to the compute dtype in place (fp32: nothing).
  void round_to_compute(float* x, int64_t n) const;
  // forward, or (recompute: full activation checkpointing's rerun) the same without
  // adding to the MoE totals.
  void forward_pass(MicroBatchContext& ctx, bool recompute);
  // The MLP's output, added to x_out after the region's reduction: dense or MoE.
  void mlp_forward(MicroBatchContext& ctx, const BlockActivations& a, const BlockDims& d, float* x_out, bool recompute);
  void moe_mlp_backward(MicroBatchContext& ctx, const BlockActivations& a, const BlockDims& d, ModelHooks* hooks);
  MoeBatch moe_batch(const MicroBatchContext& ctx) const;
  // The backward; deferred == null: fused, else the weight gradients go there.
  void backward_pass(MicroBatchContext& ctx, ModelHooks* hooks, DeferredWeightHalf* deferred);
  // Copies of the deferred layers' inputs the context does not keep (recomputed ones),
  // taken before another block's backward reuses the recompute area.
  void keep_deferred_inputs(const MicroBatchContext& ctx, DeferredWeightHalf& deferred) const;
  // The deferred layers' inputs back into the recompute area (a), which other blocks
  // used in between: from the context's packed copies and the input half's.
  void restore_deferred_inputs(const MicroBatchContext& ctx, const BlockActivations& a,
                               const DeferredWeightHalf& deferred) const;
  // This block's packed slot of `view` in the context (low precision), or null.
  const PackedActivation* packed_view(const MicroBatchContext& ctx, float* BlockActivations::*view) const;
  // Low precision under recompute: the linear layers' inputs the recompute rewrote in
  // fp32 (norm outputs, attention output, MLP activation) rounded to the compute dtype,
  // as the packed ones are, so every weight gradient (fp8's re-quantisation too) reads
  // the same values with or without recompute, fused or split.
  void round_recomputed_inputs(const MicroBatchContext& ctx, const BlockActivations& a, const BlockDims& d) const;
  // The dense MLP's backward from dstream (dL/d mlp output) into dln (dL/d ln2).
  void dense_mlp_backward(const BlockActivations& a, const BlockDims& d, const LinearBackward& linear,
                          ModelHooks* hooks);
  // Attention's backward from dstream (dL/d attention output) into dln (dL/d ln1).
  void attention_backward(const MicroBatchContext& ctx, const BlockActivations& a, const BlockDims& d,
                          const LinearBackward& linear, ModelHooks* hooks);
  // dq, dk back through QK-norm and RoPE: the gradients at the projections' outputs.
  std::pair<const float*, const float*> query_key_backward(const MicroBatchContext& ctx, const BlockActivations& a,
                                                           const BlockDims& d);
  static void poll(ModelHooks* hooks) {
    if (hooks) hooks->poll();
  }
  // What the context's checkpointing policy left out of this block's saved activations.
  void recompute(MicroBatchContext& ctx, const BlockActivations& a, const BlockDims& d);
  const ModelConfig& c_;
  int layer_;
  std::string prefix_;
  Workspace& ws_;
  const TensorParallelRegions* tp_ = nullptr;
  const ContextParallelAttention* attention_ = nullptr;
  const ExpertDispatch* experts_ = nullptr;
  MoeTotals* moe_totals_ = nullptr;
  MoeLayer moe_;
  const Parameter *ln1_w_, *ln1_b_, *ln2_w_, *ln2_b_;
  ColumnParallelLinear wq_, wk_, wv_, fc_, up_;  // fc = gate for llama
  RowParallelLinear wo_, proj_;                  // proj = down for llama
  // q, k, v as one low-precision GEMM, and llama's gate and up (model/fused_projections.h).
  FusedProjections qkv_, gate_up_;
  // The adapters of the linears lora.targets names (model/lora.h), in the order wq, wk,
  // wv, fc, up, wo, proj; an unused one has no parameters. Held here so the layers'
  // pointers stay valid.
  std::array<LoraAdapter, 7> adapters_;
  const Parameter *q_norm_, *k_norm_;
  PartialGradients partial_;
};

}  // namespace ndt
