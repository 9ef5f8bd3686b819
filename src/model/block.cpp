#include "model/block.h"

#include "kernels/kernels.h"
#include "model/norm.h"
#include "model/sequence_chunk_attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <utility>

namespace ndt {

namespace {

// A LoRA adapter's factors (model/lora.h) for the linear `base` [out, in]: A [r, in]
// normal with std 1 / r (PEFT's "gaussian" init), B [out, r] zeros, so the adapted
// model starts equal to the base. Under tp the factor split with the base's weight
// follows its split; the other is replicated and used inside the region.
void append_lora_specs(std::vector<ParameterSpec>& specs, const LoraConfig& lora, const std::string& base, int64_t out,
                       int64_t in, bool column) {
  const int64_t r = lora.rank;
  specs.push_back({base + ".lora_a", {r, in}, InitKind::normal, 1.0f / static_cast<float>(r), true, column ? -1 : 1,
                   column});
  specs.push_back({base + ".lora_b", {out, r}, InitKind::zeros, 0, true, column ? 0 : -1, !column});
}

// The activations a block's backward reads only as matmul inputs, which it then takes
// from their kept operands (model/matmul.h) without unpacking them: the norms' outputs
// and the MLP activation; not ln2 where routed experts read it, and none under fp8,
// whose linears quantise the fp32 values.
std::vector<float* BlockActivations::*> matmul_only_inputs(bool moe, bool fp8) {
  if (fp8) return {};
  if (moe) return {&BlockActivations::ln1, &BlockActivations::ff_act};
  return {&BlockActivations::ln1, &BlockActivations::ln2, &BlockActivations::ff_act};
}

}  // namespace

std::vector<ParameterSpec> block_parameter_specs(const ModelConfig& c, int layer) {
  const std::string p = "blocks." + std::to_string(layer) + ".";
  const int64_t C = c.d_model, F = c.mlp_d_ff(layer), QD = c.d_model, KD = int64_t{c.kv_heads()} * c.head_dim();
  const float std = c.init_std;
  const float residual_std = c.init_std / std::sqrt(2.0f * c.n_layer);
  const bool bias = c.has_bias();
  std::vector<ParameterSpec> specs;
  auto norm = [&](const std::string& name) {
    specs.push_back({p + name + ".weight", {C}, InitKind::ones, 0, false});
    if (bias) specs.push_back({p + name + ".bias", {C}, InitKind::zeros, 0, false});
  };
  // Tensor parallel: a column-parallel layer splits its output features (weight and
  // bias dim 0), a row-parallel one its input features (weight dim 1; bias replicated).
  enum class Split { column, row };
  auto linear = [&](const std::string& name, int64_t out, int64_t in, float init_std, Split split) {
    specs.push_back({p + name + ".weight", {out, in}, InitKind::normal, init_std, true, split == Split::column ? 0 : 1});
    if (bias) specs.push_back({p + name + ".bias", {out}, InitKind::zeros, 0, false, split == Split::column ? 0 : -1});
    if (c.lora.targets_linear(name)) append_lora_specs(specs, c.lora, p + name, out, in, split == Split::column);
  };
  norm("ln1");
  linear("attn.wq", QD, C, std, Split::column);
  linear("attn.wk", KD, C, std, Split::column);
  linear("attn.wv", KD, C, std, Split::column);
  if (!bias && c.has_qkv_bias()) {  // Qwen2's q, k, v biases: column-parallel like their weights
    const std::pair<const char*, int64_t> projections[] = {{"attn.wq", QD}, {"attn.wk", KD}, {"attn.wv", KD}};
    for (const auto& [name, out] : projections) {
      specs.push_back({p + name + ".bias", {out}, InitKind::zeros, 0, false, 0});
    }
  }
  if (c.qk_norm) {  // one weight shared by all heads: replicated, used on each rank's heads
    specs.push_back({p + "attn.q_norm.weight", {c.head_dim()}, InitKind::ones, 0, false, -1, true});
    specs.push_back({p + "attn.k_norm.weight", {c.head_dim()}, InitKind::ones, 0, false, -1, true});
  }
  linear("attn.wo", C, QD, residual_std, Split::row);
  norm("ln2");
  if (F == 0) {  // an MoE block without a shared MLP
  } else if (c.arch == Arch::gpt2) {
    linear("mlp.fc", F, C, std, Split::column);
    linear("mlp.proj", C, F, residual_std, Split::row);
  } else {
    linear("mlp.gate", F, C, std, Split::column);
    linear("mlp.up", F, C, std, Split::column);
    linear("mlp.down", C, F, residual_std, Split::row);
  }
  if (c.is_moe_block(layer)) append_moe_parameter_specs(specs, c, layer);
  for (ParameterSpec& s : specs) s.unit = 1 + layer;
  return specs;
}

Block::Block(const ModelConfig& config, int layer, const ParameterStore& store, Workspace& workspace)
    : c_(config), layer_(layer), prefix_("blocks." + std::to_string(layer) + "."), ws_(workspace) {
  const bool bias = c_.has_bias();
  const bool gpt2 = c_.arch == Arch::gpt2;
  ln1_w_ = find(store, "ln1.weight");
  ln1_b_ = find(store, "ln1.bias", bias);
  ln2_w_ = find(store, "ln2.weight");
  ln2_b_ = find(store, "ln2.bias", bias);
  wq_ = {find(store, "attn.wq.weight"), find(store, "attn.wq.bias", c_.has_qkv_bias())};
  wk_ = {find(store, "attn.wk.weight"), find(store, "attn.wk.bias", c_.has_qkv_bias())};
  wv_ = {find(store, "attn.wv.weight"), find(store, "attn.wv.bias", c_.has_qkv_bias())};
  wo_ = {find(store, "attn.wo.weight"), find(store, "attn.wo.bias", bias)};
  q_norm_ = find(store, "attn.q_norm.weight", c_.qk_norm);
  k_norm_ = find(store, "attn.k_norm.weight", c_.qk_norm);
  const bool dense = c_.mlp_d_ff(layer) > 0;
  fc_ = {find(store, gpt2 ? "mlp.fc.weight" : "mlp.gate.weight", dense), find(store, "mlp.fc.bias", dense && bias)};
  up_ = {find(store, "mlp.up.weight", dense && !gpt2), nullptr};
  proj_ = {find(store, gpt2 ? "mlp.proj.weight" : "mlp.down.weight", dense),
           find(store, "mlp.proj.bias", dense && bias)};
  if (c_.is_moe_block(layer)) {
    moe_ = MoeLayer(c_, find(store, "moe.router.weight"), find(store, gpt2 ? "moe.experts.fc.weight" : "moe.experts.gate.weight"),
                    find(store, "moe.experts.up.weight", !gpt2),
                    find(store, gpt2 ? "moe.experts.proj.weight" : "moe.experts.down.weight"));
  }
  for (ColumnParallelLinear* l : {&wq_, &wk_, &wv_, &fc_, &up_}) l->precision = &ws_.matmul;
  for (RowParallelLinear* l : {&wo_, &proj_}) l->precision = &ws_.matmul;
  if (c_.lora.enabled()) attach_adapters(store);
  qkv_ = FusedProjections({&wq_, &wk_, &wv_});
  if (dense && !gpt2) gate_up_ = FusedProjections({&fc_, &up_});
}

void Block::attach_adapters(const ParameterStore& store) {
  size_t next = 0;
  auto adapter = [&](const Parameter* weight) -> const LoraAdapter* {
    LoraAdapter& l = adapters_[next++];
    if (weight == nullptr) return nullptr;
    const std::string base = weight->name().substr(0, weight->name().size() - std::string(".weight").size());
    if (!c_.lora.targets_linear(base.substr(prefix_.size()))) return nullptr;
    l = {&store.get(base + ".lora_a"), &store.get(base + ".lora_b"), c_.lora.scale(), &partial_};
    return &l;
  };
  for (ColumnParallelLinear* l : {&wq_, &wk_, &wv_, &fc_, &up_}) l->lora = adapter(l->weight);
  for (RowParallelLinear* l : {&wo_, &proj_}) l->lora = adapter(l->weight);
}

void Block::bind(const TensorParallelRegions& tp) {
  tp_ = &tp;
  if (moe_.active()) {
    NDT_CHECK(c_.expert_d_ff() % tp.size() == 0 && c_.moe_shared_d_ff % tp.size() == 0,
              "model.moe_d_ff = {} and model.moe_shared_d_ff = {} must divide over parallel.tp = {} (each tp rank "
              "holds a slice of every expert's hidden units)",
              c_.expert_d_ff(), c_.moe_shared_d_ff, tp.size());
  }
  std::vector<const Parameter*> partial = {ln1_w_, ln1_b_, ln2_w_, ln2_b_, wo_.bias, proj_.bias, q_norm_, k_norm_,
                                           moe_.router()};
  for (const LoraAdapter& l : adapters_) partial.insert(partial.end(), {l.a, l.b});  // the replicated factor's
  partial_ = PartialGradients(tp, partial);
}

const Parameter* Block::find(const ParameterStore& store, const std::string& suffix, bool required) {
  if (!required) return nullptr;
  return &store.get(prefix_ + suffix);
}

BlockActivations Block::activations(const MicroBatchContext& ctx) const {
  return with_recompute_area(ctx.blocks[static_cast<size_t>(layer_)], ws_.recompute);
}

// The pieces of forward that selective recompute reruns: a norm (on the local rows,
// all-gathered into `out` under sequence parallel), the attention core, the activation.
void Block::norm(float* out, float* mean, float* rstd, const float* x, const Parameter& w, const Parameter* b,
                 const BlockDims& d) {
  float* local = tp_->splits_rows() ? ws_.block.dln_local : out;
  norm_forward(c_, local, mean, rstd, x, w, b, d.Nl);
  tp_->column_input_forward(local, out, d.Nl, d.C);
}

const int32_t* Block::document_starts(const MicroBatchContext& ctx) {
  return ctx.document_starts.empty() ? nullptr : ctx.document_starts.data();
}

const ContextParallelAttention& Block::attention(const MicroBatchContext& ctx) const {
  static const ContextParallelAttention local;
  return ctx.cp.active() ? *attention_ : local;
}

void Block::attention_core(const MicroBatchContext& ctx, const BlockActivations& a, const BlockDims& d) {
  const int B = ctx.B, T = ctx.T;
  const AttentionForward f{a.att_out, a.lse, a.att, a.q, a.k, a.v, B, T, static_cast<int>(d.NH),
                           static_cast<int>(d.NKV), static_cast<int>(d.HS), ws_.block.cp_scratch,
                           document_starts(ctx), ws_.matmul.dtype};
  if (ctx.sequence.active()) {
    sequence_chunk_attention_forward(f, ctx.sequence, layer_);  // keeps no probabilities
    return;
  }
  attention(ctx).forward(f);
  round_to_compute(a.att, attention_probability_floats(ctx.cp, ws_.matmul.dtype, B, T, d.NH));
}

void Block::round_to_compute(float* x, int64_t n) const {
  if (ws_.matmul.dtype != DType::f32) kernels::round_to_lowp(ws_.matmul.dtype, x, n);
}

void Block::activation(const BlockActivations& a, const BlockDims& d) {
  if (c_.arch == Arch::gpt2) {
    kernels::gelu_forward(a.ff_act, a.ff_pre, d.N * d.F);
  } else {
    kernels::swiglu_forward(a.ff_act, a.ff_pre, a.ff_up, d.N * d.F);
  }
}

void Block::activation_backward(const BlockActivations& a, const BlockDims& d) {
  BlockScratch& s = ws_.block;
  kernels::zero(s.dff_b, d.N * d.F);
  if (c_.arch == Arch::gpt2) {
    kernels::gelu_backward(s.dff_b, a.ff_pre, s.dff_a, d.N * d.F);
  } else {
    kernels::zero(s.dff_c, d.N * d.F);
    kernels::swiglu_backward(s.dff_b, s.dff_c, s.dff_a, a.ff_pre, a.ff_up, d.N * d.F);
  }
}

void Block::forward(MicroBatchContext& ctx) { forward_pass(ctx, /*recompute=*/false); }

void Block::forward_pass(MicroBatchContext& ctx, bool recompute) {
  const int B = ctx.B, T = ctx.T;
  ws_.fit(ctx);
  const TensorParallelRegions& tp = *tp_;
  const BlockDims d(c_, tp.layout(), B, T, layer_);
  const float* x_in = ctx.stream[static_cast<size_t>(layer_)];
  float* x_out = ctx.stream[static_cast<size_t>(layer_) + 1];
  const BlockActivations a = activations(ctx);
  BlockScratch& s = ws_.block;
  // Low precision: a matmul rounds an input the context keeps straight into its copy.
  std::vector<KeptOperand> kept = kept_operands(ctx, layer_, ws_.recompute, /*written=*/false);
  const KeptOperandsScope kept_scope(ws_.matmul, kept);
  // Attention: norm on the local rows, then the region (this rank's heads) on all rows.
  norm(a.ln1, a.ln1_mean, a.ln1_rstd, x_in, *ln1_w_, ln1_b_, d);
  float* q_dst = c_.qk_norm ? a.q_pre : a.q;
  float* k_dst = c_.qk_norm ? a.k_pre : a.k;
  // Low precision: what backward reads is rounded where it is made, so forward computes
  // with the very values the context keeps (or recompute rebuilds).
  if (qkv_.active()) {
    float* const outs[] = {q_dst, k_dst, a.v};
    qkv_.forward(outs, a.ln1, d.N, s.qkv_out);
  } else {
    wq_.forward(q_dst, a.ln1, d.N);
    wk_.forward(k_dst, a.ln1, d.N);
    wv_.forward(a.v, a.ln1, d.N);
    round_to_compute(q_dst, d.N * d.QD);
    round_to_compute(k_dst, d.N * d.KD);
    round_to_compute(a.v, d.N * d.KD);
  }
  const int N = static_cast<int>(d.N);
  if (c_.qk_norm) {
    kernels::rmsnorm_forward(a.q, a.q_rstd, a.q_pre, q_norm_->data(), N * d.NH, d.HS, c_.norm_eps);
    kernels::rmsnorm_forward(a.k, a.k_rstd, a.k_pre, k_norm_->data(), N * d.NKV, d.HS, c_.norm_eps);
  }
  if (c_.arch == Arch::llama) {  // each row at its own position (ctx.positions, [B, T])
    kernels::rope_forward_at(a.q, a.q, B, T, d.NH, d.HS, ctx.positions.data(), c_.rope_frequencies());
    kernels::rope_forward_at(a.k, a.k, B, T, d.NKV, d.HS, ctx.positions.data(), c_.rope_frequencies());
  }
  if (c_.qk_norm || c_.arch == Arch::llama) {
    round_to_compute(a.q, d.N * d.QD);
    round_to_compute(a.k, d.N * d.KD);
  }
  attention_core(ctx, a, d);
  wo_.forward(tp, a.x_mid, tp.splits_rows() ? s.dln : a.x_mid, a.att_out, d.N);
  kernels::add_inplace(a.x_mid, x_in, d.Nl * d.C);

  // MLP, the same way.
  norm(a.ln2, a.ln2_mean, a.ln2_rstd, a.x_mid, *ln2_w_, ln2_b_, d);
  mlp_forward(ctx, a, d, x_out, recompute);
  kernels::add_inplace(x_out, a.x_mid, d.Nl * d.C);
  pack_block_activations(ctx, layer_, ws_.recompute, kept);
  // Full recompute keeps nothing of the block: its backward reruns the experts too.
  if (!recompute && ctx.checkpointing.of_block(layer_) == CheckpointMode::full) {
    ctx.moe[static_cast<size_t>(layer_)] = MoeActivations{};
  }
}

MoeBatch Block::moe_batch(const MicroBatchContext& ctx) const {
  return {ctx.B, ctx.T, ctx.cp.size, ctx.grad_scale, tp_->rank() == 0};
}

void Block::mlp_forward(MicroBatchContext& ctx, const BlockActivations& a, const BlockDims& d, float* x_out,
                        bool recompute) {
  const TensorParallelRegions& tp = *tp_;
  float* partial = tp.splits_rows() ? ws_.block.dln : x_out;  // [N, C]
  if (gate_up_.active()) {
    float* const outs[] = {a.ff_pre, a.ff_up};
    gate_up_.forward(outs, a.ln2, d.N, ws_.block.gate_up_out);
  } else if (d.F > 0) {
    fc_.forward(a.ff_pre, a.ln2, d.N);
    round_to_compute(a.ff_pre, d.N * d.F);
    if (c_.arch == Arch::llama) {
      up_.forward(a.ff_up, a.ln2, d.N);
      round_to_compute(a.ff_up, d.N * d.F);
    }
  }
  if (d.F > 0) {
    activation(a, d);
    if (!moe_.active()) {
      proj_.forward(tp, x_out, partial, a.ff_act, d.N);
      return;
    }
    matmul_forward(ws_.matmul, partial, a.ff_act, *proj_.weight, nullptr, d.N);
    if (proj_.lora) proj_.lora->forward(ws_.matmul, partial, a.ff_act, d.N);
  } else {
    kernels::zero(partial, d.N * d.C);
  }
  // The routed experts add their (tp-partial) output to the shared MLP's before the
  // region's reduction. Evaluation and recompute add nothing to the totals.
  MoeTotals* totals = recompute || ctx.forward_only ? nullptr : moe_totals_;
  moe_.bind(*experts_, attention(ctx), ws_.matmul.dtype);
  moe_.forward(ctx.moe[static_cast<size_t>(layer_)], moe_batch(ctx), a.ln2, partial, totals ? &totals->aux_sum : nullptr,
               totals ? &totals->z_sum : nullptr, totals ? &totals->stats : nullptr);
  const float* y = tp.row_output_forward(partial, x_out, d.Nl, d.C);
  if (y != x_out) kernels::copy(x_out, y, d.Nl * d.C);
  if (proj_.bias) kernels::add_bias(x_out, proj_.bias->data(), d.Nl, d.C);
}

void Block::moe_mlp_backward(MicroBatchContext& ctx, const BlockActivations& a, const BlockDims& d, ModelHooks* hooks) {
  const TensorParallelRegions& tp = *tp_;
  BlockScratch& s = ws_.block;
  float* dres = ws_.dstream;  // dL/dx_out [Nl, C]
  const float* dout = tp.row_output_backward(dres, s.dout_full, d.Nl, d.C);  // all rows
  kernels::zero(s.dln, d.N * d.C);
  if (d.F > 0) {  // the shared MLP
    if (proj_.bias && proj_.bias->trainable()) kernels::bias_backward(partial_.grad(proj_.bias), dres, d.Nl, d.C);
    kernels::zero(s.dff_a, d.N * d.F);
    matmul_backward(ws_.matmul, s.dff_a, /*weight_grad=*/true, nullptr, dout, a.ff_act, *proj_.weight, d.N);
    if (proj_.lora) proj_.lora->backward(ws_.matmul, s.dff_a, dout, a.ff_act, d.N);
    activation_backward(a, d);
    if (gate_up_.active()) {
      const float* const douts[] = {s.dff_b, s.dff_c};
      gate_up_.backward(s.dln, douts, a.ln2, d.N);
    } else {
      if (c_.arch == Arch::llama) up_.backward(s.dln, s.dff_c, a.ln2, d.N);
      fc_.backward(s.dln, s.dff_b, a.ln2, d.N);
    }
    poll(hooks);
  }
  moe_.bind(*experts_, attention(ctx), ws_.matmul.dtype);
  moe_.backward(ctx.moe[static_cast<size_t>(layer_)], moe_batch(ctx), a.ln2, dout, partial_.grad(moe_.router()), s.dln);
  poll(hooks);
}

void Block::round_recomputed_inputs(const MicroBatchContext& ctx, const BlockActivations& a, const BlockDims& d) const {
  if (ctx.checkpointing.of_block(layer_) == CheckpointMode::none || ws_.matmul.dtype == DType::f32) return;
  round_to_compute(a.ln1, d.N * d.C);
  round_to_compute(a.att_out, d.N * d.QD);
  round_to_compute(a.ln2, d.N * d.C);
  if (d.F > 0) round_to_compute(a.ff_act, d.N * d.F);
}

void Block::recompute(MicroBatchContext& ctx, const BlockActivations& a, const BlockDims& d) {
  switch (ctx.checkpointing.of_block(layer_)) {
    case CheckpointMode::none: return;
    case CheckpointMode::full:
      // The whole forward again, into the recompute area; it also rewrites the block's
      // output (the next block's input) with the same values.
      forward_pass(ctx, /*recompute=*/true);
      return;
    case CheckpointMode::selective: {
      const float* x_in = ctx.stream[static_cast<size_t>(layer_)];
      norm(a.ln1, a.ln1_mean, a.ln1_rstd, x_in, *ln1_w_, ln1_b_, d);
      attention_core(ctx, a, d);  // also rewrites att_out, with the same values
      norm(a.ln2, a.ln2_mean, a.ln2_rstd, a.x_mid, *ln2_w_, ln2_b_, d);
      activation(a, d);
      return;
    }
  }
}

void Block::backward(MicroBatchContext& ctx, ModelHooks* hooks) { backward_pass(ctx, hooks, nullptr); }

void Block::backward_input(MicroBatchContext& ctx, ModelHooks* hooks) {
  if (ctx.deferred.size() < static_cast<size_t>(c_.n_layer)) ctx.deferred.resize(static_cast<size_t>(c_.n_layer));
  DeferredWeightHalf& deferred = ctx.deferred[static_cast<size_t>(layer_)];
  NDT_CHECK(!deferred.pending, "block {}: backward_input twice without backward_weight", layer_);
  backward_pass(ctx, hooks, &deferred);
  keep_deferred_inputs(ctx, deferred);
  deferred.pending = true;  // also with every weight frozen (nothing deferred): it pairs the two halves
}

void Block::keep_deferred_inputs(const MicroBatchContext& ctx, DeferredWeightHalf& deferred) const {
  const BlockActivations& saved = ctx.blocks[static_cast<size_t>(layer_)];
  std::erase_if(deferred.inputs, [&](const DeferredInput& in) { return saved.*(in.view) != nullptr; });
  const BlockActivations a = activations(ctx);
  const DType compute = ws_.matmul.dtype;
  for (DeferredInput& in : deferred.inputs) {
    if (packed_view(ctx, in.view)) continue;  // the context keeps it packed
    in.kept = Tensor::empty({in.numel}, compute, MemTag::activations);
    if (compute == DType::f32) {
      kernels::copy(in.kept.data<float>(), a.*(in.view), in.numel);
    } else {
      kernels::cast_to_lowp(compute, a.*(in.view), static_cast<uint16_t*>(in.kept.raw()), in.numel);
    }
  }
}

void Block::restore_deferred_inputs(const MicroBatchContext& ctx, const BlockActivations& a,
                                    const DeferredWeightHalf& deferred) const {
  for (const DeferredInput& in : deferred.inputs) {
    const PackedActivation* packed = packed_view(ctx, in.view);
    if (packed) {
      kernels::cast_from_lowp(ctx.compute, packed->data, a.*(in.view), packed->numel);
    } else if (in.kept.dtype() == DType::f32) {
      kernels::copy(a.*(in.view), in.kept.data<float>(), in.numel);
    } else {
      kernels::cast_from_lowp(in.kept.dtype(), static_cast<const uint16_t*>(in.kept.raw()), a.*(in.view), in.numel);
    }
  }
}

const PackedActivation* Block::packed_view(const MicroBatchContext& ctx, float* BlockActivations::*view) const {
  for (const PackedActivation& p : ctx.packed[static_cast<size_t>(layer_)]) {
    if (p.view == view) return &p;
  }
  return nullptr;
}

void Block::backward_weight(MicroBatchContext& ctx, ModelHooks* hooks) {
  NDT_CHECK(static_cast<size_t>(layer_) < ctx.deferred.size() && ctx.deferred[static_cast<size_t>(layer_)].pending,
            "block {}: backward_weight without backward_input", layer_);
  DeferredWeightHalf& deferred = ctx.deferred[static_cast<size_t>(layer_)];
  ws_.fit(ctx);
  const BlockActivations a = activations(ctx);
  restore_deferred_inputs(ctx, a, deferred);
  for (DeferredWeightGradient& w : deferred.gradients) {
    w.apply(w.dout.data<float>(), a);
    poll(hooks);
  }
  deferred = {};  // frees the copies
}

// A linear layer's backward under a fused or split (zero-bubble) pass: fused, both halves
// in one matmul backward (a low-precision output gradient is then rounded once for both);
// split, the input half now and the weight half later, from a copy of the output gradient
// (the workspace is reused before the weight half runs) and the layer's input, which
// the weight half finds in the block's views (noted in `inputs`; Block::backward_weight
// restores what the context does not keep).
class LinearBackward {
 public:
  using View = float* BlockActivations::*;
  LinearBackward(const TensorParallelRegions& tp, const BlockActivations& a, float* dout_full, int64_t rows,
                 DeferredWeightHalf* deferred)
      : tp_(tp), a_(a), dout_full_(dout_full), rows_(rows), deferred_(deferred) {}

  void column(const ColumnParallelLinear& layer, float* dinp, const float* dout, View input) const {
    const float* inp = a_.*input;
    if (!deferred_) return layer.backward(dinp, dout, inp, rows_);
    layer.backward_input(dinp, dout, inp, rows_);
    if (has_weight_half(layer)) defer(layer, dout, input);
  }

  // Fused projections sharing one input: split, the input half now, and the weight half
  // later from a copy of the output gradients side by side (one GEMM, as fused).
  void columns(const FusedProjections& layers, float* dinp, const float* const* douts, View input) const {
    if (!deferred_) return layers.backward(dinp, douts, a_.*input, rows_);
    layers.backward_input(dinp, douts, rows_);
    std::array<kernels::ColumnBlock, FusedProjections::kMaxLayers> blocks;
    for (int i = 0; i < layers.size(); ++i) {
      blocks[static_cast<size_t>(i)] = {const_cast<float*>(douts[i]), nullptr, layers.out_features(i)};  // read only
    }
    Tensor copy = Tensor::empty({rows_ * layers.width()}, DType::f32, MemTag::activations);
    kernels::gather_columns(blocks.data(), layers.size(), rows_, copy.data<float>());
    auto apply = [&layers, input, rows = rows_](const float* dy, const BlockActivations& a) {
      layers.backward_weight(dy, a.*input, rows);
    };
    keep(std::move(copy), apply, input, rows_ * layers.in_features());
  }

  void row(const RowParallelLinear& layer, float* dinp, const float* dout, View input, float* dbias) const {
    const float* inp = a_.*input;
    if (!deferred_) return layer.backward(tp_, dinp, dout_full_, dout, inp, rows_, dbias);
    const float* dy = layer.backward_input(tp_, dinp, dout_full_, dout, inp, rows_, dbias);
    if (has_weight_half(layer)) defer(layer, dy, input);
  }

 private:
  // A layer whose weight and bias are frozen (LoRA's bases) has no weight half: nothing
  // is kept for it (its adapter's gradients come with the input half).
  template <class Layer>
  static bool has_weight_half(const Layer& layer) {
    return layer.weight->trainable() || (layer.bias && layer.bias->trainable());
  }

  // dout: the [rows, OC] output gradient the weight half multiplies with the input.
  template <class Layer>
  void defer(const Layer& layer, const float* dout, View input) const {
    const int64_t numel = rows_ * layer.weight->local_shape[0];
    Tensor copy = Tensor::empty({numel}, DType::f32, MemTag::activations);
    kernels::copy(copy.data<float>(), dout, numel);
    auto apply = [&layer, input, rows = rows_](const float* dy, const BlockActivations& a) {
      layer.backward_weight(dy, a.*input, rows);
    };
    keep(std::move(copy), apply, input, rows_ * layer.weight->local_shape[1]);
  }

  // Notes a deferred weight gradient: the output gradient's copy, what applies it, and
  // its input (input_numel elements), kept once per view.
  void keep(Tensor copy, std::function<void(const float*, const BlockActivations&)> apply, View input,
            int64_t input_numel) const {
    deferred_->gradients.push_back({std::move(copy), std::move(apply)});
    std::vector<DeferredInput>& inputs = deferred_->inputs;
    auto same_view = [&](const DeferredInput& in) { return in.view == input; };
    if (std::none_of(inputs.begin(), inputs.end(), same_view)) inputs.push_back({input, input_numel, Tensor()});
  }

  const TensorParallelRegions& tp_;
  const BlockActivations& a_;
  float* dout_full_;
  int64_t rows_;
  DeferredWeightHalf* deferred_;
};

void Block::backward_pass(MicroBatchContext& ctx, ModelHooks* hooks, DeferredWeightHalf* deferred) {
  ws_.fit(ctx);
  const TensorParallelRegions& tp = *tp_;
  const BlockDims d(c_, tp.layout(), ctx.B, ctx.T, layer_);
  float* dres = ws_.dstream;
  const BlockActivations a = activations(ctx);
  const auto matmul_only = matmul_only_inputs(moe_.active(), ws_.matmul.fp8 != nullptr);
  unpack_block_activations(ctx, layer_, ws_.recompute, matmul_only);
  // The matmuls read the inputs the context keeps from its copies.
  std::vector<KeptOperand> kept = kept_operands(ctx, layer_, ws_.recompute, /*written=*/true);
  const KeptOperandsScope kept_scope(ws_.matmul, kept);
  recompute(ctx, a, d);
  round_recomputed_inputs(ctx, a, d);
  BlockScratch& s = ws_.block;
  const LinearBackward linear(tp, a, s.dout_full, d.N, deferred);
  partial_.begin();
  // MLP: dres is dL/dx_out, which is also dL/d(mlp output).
  if (moe_.active()) {
    moe_mlp_backward(ctx, a, d, hooks);
  } else {
    dense_mlp_backward(a, d, linear, hooks);
  }
  // dres becomes dL/dx_mid: the residual path plus the norm2 path.
  const float* dln2 = tp.column_input_backward(s.dln, s.dln_local, d.Nl, d.C);
  norm_backward(c_, dres, partial_.grad(ln2_w_), partial_.grad(ln2_b_), *ln2_w_, dln2, a.x_mid, a.ln2_mean,
                a.ln2_rstd, d.Nl);
  attention_backward(ctx, a, d, linear, hooks);
  // dres becomes dL/dx_in.
  const float* dln1 = tp.column_input_backward(s.dln, s.dln_local, d.Nl, d.C);
  norm_backward(c_, dres, partial_.grad(ln1_w_), partial_.grad(ln1_b_), *ln1_w_, dln1,
                ctx.stream[static_cast<size_t>(layer_)], a.ln1_mean, a.ln1_rstd, d.Nl);
  partial_.finish();
  if (moe_.active()) ctx.moe[static_cast<size_t>(layer_)] = MoeActivations{};  // read for the last time
}

void Block::dense_mlp_backward(const BlockActivations& a, const BlockDims& d, const LinearBackward& linear,
                               ModelHooks* hooks) {
  BlockScratch& s = ws_.block;
  kernels::zero(s.dff_a, d.N * d.F);
  linear.row(proj_, s.dff_a, ws_.dstream, &BlockActivations::ff_act, partial_.grad(proj_.bias));
  poll(hooks);
  kernels::zero(s.dln, d.N * d.C);
  activation_backward(a, d);
  if (gate_up_.active()) {
    const float* const douts[] = {s.dff_b, s.dff_c};
    linear.columns(gate_up_, s.dln, douts, &BlockActivations::ln2);
    poll(hooks);
    return;
  }
  if (c_.arch == Arch::llama) {
    linear.column(up_, s.dln, s.dff_c, &BlockActivations::ln2);
    poll(hooks);
  }
  linear.column(fc_, s.dln, s.dff_b, &BlockActivations::ln2);
  poll(hooks);
}

void Block::attention_backward(const MicroBatchContext& ctx, const BlockActivations& a, const BlockDims& d,
                               const LinearBackward& linear, ModelHooks* hooks) {
  BlockScratch& s = ws_.block;
  kernels::zero(s.datt_out, d.N * d.QD);
  linear.row(wo_, s.datt_out, ws_.dstream, &BlockActivations::att_out, partial_.grad(wo_.bias));
  poll(hooks);
  kernels::zero(s.dq, d.N * d.QD);
  kernels::zero(s.dk, d.N * d.KD);
  kernels::zero(s.dv, d.N * d.KD);
  const AttentionBackward b{s.dq, s.dk, s.dv, s.datt_out, a.q, a.k, a.v, a.att, a.att_out, a.lse, ctx.B, ctx.T,
                            static_cast<int>(d.NH), static_cast<int>(d.NKV), static_cast<int>(d.HS), s.cp_scratch,
                            document_starts(ctx), ws_.matmul.dtype};
  if (ctx.sequence.active()) {
    sequence_chunk_attention_backward(b, ctx.sequence, layer_);
  } else {
    attention(ctx).backward(b);
  }
  poll(hooks);
  const auto [dq, dk] = query_key_backward(ctx, a, d);
  kernels::zero(s.dln, d.N * d.C);
  if (qkv_.active()) {
    const float* const douts[] = {dq, dk, s.dv};
    linear.columns(qkv_, s.dln, douts, &BlockActivations::ln1);
    poll(hooks);
    return;
  }
  linear.column(wq_, s.dln, dq, &BlockActivations::ln1);
  poll(hooks);
  linear.column(wk_, s.dln, dk, &BlockActivations::ln1);
  poll(hooks);
  linear.column(wv_, s.dln, s.dv, &BlockActivations::ln1);
  poll(hooks);
}

std::pair<const float*, const float*> Block::query_key_backward(const MicroBatchContext& ctx,
                                                                const BlockActivations& a, const BlockDims& d) {
  BlockScratch& s = ws_.block;
  float *dq = s.dq, *dq2 = s.dq2, *dk = s.dk, *dk2 = s.dk2;
  if (c_.arch == Arch::llama) {
    kernels::zero(dq2, d.N * d.QD);
    kernels::zero(dk2, d.N * d.KD);
    kernels::rope_backward_at(dq2, dq, ctx.B, ctx.T, d.NH, d.HS, ctx.positions.data(), c_.rope_frequencies());
    kernels::rope_backward_at(dk2, dk, ctx.B, ctx.T, d.NKV, d.HS, ctx.positions.data(), c_.rope_frequencies());
    std::swap(dq, dq2);
    std::swap(dk, dk2);
  }
  if (c_.qk_norm) {
    const int N = static_cast<int>(d.N);
    kernels::zero(dq2, d.N * d.QD);
    kernels::zero(dk2, d.N * d.KD);
    kernels::rmsnorm_backward(dq2, partial_.grad(q_norm_), dq, a.q_pre, q_norm_->data(), a.q_rstd, N * d.NH, d.HS);
    kernels::rmsnorm_backward(dk2, partial_.grad(k_norm_), dk, a.k_pre, k_norm_->data(), a.k_rstd, N * d.NKV, d.HS);
    std::swap(dq, dq2);
    std::swap(dk, dk2);
  }
  return {dq, dk};
}

}  // namespace ndt
