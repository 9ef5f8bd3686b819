#include "model/transformer.h"

#include "core/error.h"
#include "model/block.h"
#include "model/document_starts.h"
#include "model/embedding.h"
#include "model/freeze.h"
#include "model/head.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace ndt {

std::vector<ParameterSpec> model_parameter_specs(const ModelConfig& c) {
  c.validate();
  const int64_t C = c.d_model;
  const int head_unit = c.n_layer + 1;
  std::vector<ParameterSpec> specs;
  // The token embedding and the output layer split the vocabulary over tp.
  specs.push_back({"wte.weight", {c.vocab_size, C}, InitKind::normal, c.init_std, false, 0});
  if (c.arch == Arch::gpt2) {
    specs.push_back({"wpe.weight", {c.max_seq_len, C}, InitKind::normal, c.init_std, false});
  }
  for (int l = 0; l < c.n_layer; ++l) {
    auto block = block_parameter_specs(c, l);
    specs.insert(specs.end(), block.begin(), block.end());
  }
  specs.push_back({"lnf.weight", {C}, InitKind::ones, 0, false});
  specs.back().unit = head_unit;
  if (c.has_bias()) {
    specs.push_back({"lnf.bias", {C}, InitKind::zeros, 0, false});
    specs.back().unit = head_unit;
  }
  if (!c.tied_embeddings) {
    specs.push_back({"lm_head.weight", {c.vocab_size, C}, InitKind::normal, c.init_std, true, 0});
    specs.back().unit = head_unit;
  }
  // LoRA trains the adapters alone, as PEFT does: every other parameter is frozen.
  if (c.lora.enabled()) {
    for (ParameterSpec& s : specs) s.frozen = !is_lora_parameter(s.name);
  }
  apply_freeze_patterns(specs, c.freeze);
  return specs;
}

int64_t count_parameters(const ModelConfig& config) {
  int64_t n = 0;
  for (const ParameterSpec& s : model_parameter_specs(config)) n += shape_numel(s.logical_shape);
  return n;
}

int64_t count_trainable_parameters(const ModelConfig& config) {
  int64_t n = 0;
  for (const ParameterSpec& s : model_parameter_specs(config)) n += s.frozen ? 0 : shape_numel(s.logical_shape);
  return n;
}

Transformer::Transformer(const ModelConfig& config, uint64_t seed, int loss_chunk_rows, bool materialize_parameters)
    : config_(config),
      store_(model_parameter_specs(config), seed, materialize_parameters),
      workspace_(config_, loss_chunk_rows) {
  NDT_CHECK(loss_chunk_rows > 0, "train.loss_chunk_rows = {} must be positive", loss_chunk_rows);
  units_.push_back(std::make_unique<Embedding>(config_, store_, workspace_));
  for (int l = 0; l < config_.n_layer; ++l) {
    auto block = std::make_unique<Block>(config_, l, store_, workspace_);
    blocks_.push_back(block.get());
    units_.push_back(std::move(block));
  }
  auto head = std::make_unique<Head>(config_, store_, workspace_);
  head_ = head.get();
  units_.push_back(std::move(head));
  set_tensor_parallel(std::make_unique<TensorParallelRegions>());
  set_context_parallel(std::make_unique<ContextParallelAttention>());
  set_expert_dispatch(std::make_unique<ExpertDispatch>());
}

Transformer::~Transformer() = default;

void Transformer::set_tensor_parallel(std::unique_ptr<TensorParallelRegions> tp) {
  tp_ = std::move(tp);
  workspace_.set_layout(tp_->layout());
  for (auto& u : units_) u->bind(*tp_);
}

void Transformer::set_context_parallel(std::unique_ptr<ContextParallelAttention> cp) {
  cp_ = std::move(cp);
  for (Block* b : blocks_) b->bind_attention(*cp_);
}

void Transformer::set_expert_dispatch(std::unique_ptr<ExpertDispatch> ep) {
  NDT_CHECK(config_.n_experts % ep->size() == 0, "model.n_experts = {} does not split over parallel.ep = {}",
            config_.n_experts, ep->size());
  ep_ = std::move(ep);
  for (Block* b : blocks_) b->bind_experts(*ep_, &moe_totals_);
}

MoeTotals Transformer::take_moe_totals() { return std::exchange(moe_totals_, MoeTotals{}); }

ActivationLayout Transformer::activation_layout() const {
  ActivationLayout layout = tp_->layout();
  layout.cp = cp_->layout();
  return layout;
}

namespace {

// Training FLOPs per weight element and token: forward 2, input gradient 2, weight
// gradient 2; a frozen weight (fine-tuning) has no weight gradient.
double per_element(const ParameterSpec& spec) { return spec.frozen ? 4.0 : 6.0; }

}  // namespace

std::vector<double> unit_flops_per_token(const ModelConfig& c, int T) {
  std::vector<double> flops(static_cast<size_t>(c.n_layer) + 2, 0.0);
  std::vector<double> expert_factor(static_cast<size_t>(c.n_layer), 6.0);
  for (const ParameterSpec& spec : model_parameter_specs(c)) {
    const bool lookup = spec.name == "wpe.weight" || (spec.name == "wte.weight" && !c.tied_embeddings);
    // A tied embedding's matmul is the output layer's, in the head.
    const int unit = spec.name == "wte.weight" ? c.n_layer + 1 : spec.unit;
    if (!lookup) flops[static_cast<size_t>(unit)] += per_element(spec) * static_cast<double>(shape_numel(spec.logical_shape));
    if (spec.expert) expert_factor[static_cast<size_t>(spec.unit - 1)] = per_element(spec);
  }
  for (int l = 0; l < c.n_layer; ++l) {
    double& block = flops[static_cast<size_t>(l) + 1];
    if (c.is_moe_block(l)) block -= expert_factor[static_cast<size_t>(l)] * static_cast<double>(moe_idle_expert_params(c));
    block += 12.0 * c.d_model * static_cast<double>(T);
  }
  return flops;
}

std::vector<double> unit_expert_flops_per_token(const ModelConfig& c) {
  std::vector<double> flops(static_cast<size_t>(c.n_layer) + 2, 0.0);
  for (const ParameterSpec& spec : model_parameter_specs(c)) {
    if (!spec.expert) continue;
    flops[static_cast<size_t>(spec.unit)] +=
        per_element(spec) * static_cast<double>(shape_numel(spec.logical_shape)) * c.moe_top_k / c.n_experts;
  }
  return flops;
}

std::vector<double> unit_recompute_flops_per_token(const ModelConfig& c, int T, const ActivationCheckpointing& policy,
                                                   bool recomputes_scores) {
  std::vector<double> flops(static_cast<size_t>(c.n_layer) + 2, 0.0);
  const double attention_core = 4.0 * c.d_model * static_cast<double>(T);
  for (int l = 0; l < c.n_layer; ++l) {
    double& block = flops[static_cast<size_t>(l) + 1];
    // Flash-style attention keeps no probabilities: backward recomputes the scores.
    if (recomputes_scores) block += 2.0 * c.d_model * static_cast<double>(T);
    switch (policy.of_block(l)) {
      case CheckpointMode::none: break;
      case CheckpointMode::selective: block += attention_core; break;
      case CheckpointMode::full: {
        int64_t block_params = 0;
        for (const ParameterSpec& spec : block_parameter_specs(c, l)) block_params += shape_numel(spec.logical_shape);
        if (c.is_moe_block(l)) block_params -= moe_idle_expert_params(c);
        block += 2.0 * static_cast<double>(block_params) + attention_core;
        break;
      }
    }
  }
  return flops;
}

int64_t Transformer::matmul_params() const {
  auto logical = [](const Parameter& p) { return shape_numel(p.spec.logical_shape); };
  int64_t n = 0;
  for (const Parameter& p : store_.params()) n += logical(p);
  if (config_.arch == Arch::gpt2) n -= logical(store_.get("wpe.weight"));
  if (!config_.tied_embeddings) n -= logical(store_.get("wte.weight"));
  return n;
}

int64_t Transformer::active_matmul_params() const {
  int64_t n = matmul_params();
  for (int l = 0; l < config_.n_layer; ++l) {
    if (config_.is_moe_block(l)) n -= moe_idle_expert_params(config_);
  }
  return n;
}

double Transformer::flops_per_token(int T) const {
  const std::vector<double> units = unit_flops_per_token(config_, T);
  return std::accumulate(units.begin(), units.end(), 0.0);
}

bool recomputes_attention_scores(bool context_parallel, DType compute) {
  return context_parallel || compute != DType::f32;
}

double Transformer::recompute_flops_per_token(int T) const {
  const bool scores = recomputes_attention_scores(cp_->layout().active(), precision_.compute);
  const std::vector<double> units = unit_recompute_flops_per_token(config_, T, checkpointing_, scores);
  return std::accumulate(units.begin(), units.end(), 0.0);
}

void Transformer::set_activation_checkpointing(const ActivationCheckpointing& policy) {
  NDT_CHECK(policy.every >= 1, "train.activation_checkpointing_every = {} must be at least 1", policy.every);
  checkpointing_ = policy;
  workspace_.set_checkpointing(policy);
}

void Transformer::set_precision(const Precision& precision) {
  NDT_CHECK(!precision.fp8 || precision.compute == DType::bf16,
            "precision.fp8 = true computes the linear layers' fp8 products in the bf16 GEMM: it needs "
            "precision.compute = \"bf16\", not \"{}\"",
            compute_dtype_config_name(precision.compute));
  check_moe_precision(config_, precision);
  precision_ = precision;
  store_.set_compute_dtype(precision.compute);
  workspace_.set_compute_dtype(precision.compute);
  fp8_ = precision.fp8 ? std::make_unique<Fp8Linears>(store_, precision.fp8_scaling) : nullptr;
  workspace_.matmul.fp8 = fp8_.get();
}

void Transformer::set_document_separator(std::optional<int32_t> separator) {
  NDT_CHECK(!separator || (*separator >= 0 && *separator < config_.vocab_size),
            "data.document_separator = {} is outside the vocabulary [0, {}) (model.vocab_size)", separator.value_or(0),
            config_.vocab_size);
  separator_ = separator;
}

void Transformer::set_z_loss(float coefficient) {
  NDT_CHECK(std::isfinite(coefficient) && coefficient >= 0.0f,
            "optim.z_loss = {} must be finite and non-negative (0: no z-loss)", coefficient);
  head_->set_z_loss(coefficient);
}

float Transformer::z_loss() const { return head_->z_loss(); }

int64_t Transformer::predict_activation_bytes(const ModelConfig& c, int B, int T, int loss_chunk_rows,
                                              const ActivationLayout& tp, const ActivationCheckpointing& policy,
                                              const std::vector<char>& local_units, DType compute) {
  const int local_T = T / tp.cp.size;
  int64_t moe = 0;
  for (int l = 0; l < c.n_layer; ++l) {
    if (local_units.empty() || local_units[static_cast<size_t>(1 + l)]) moe += moe_block_floats(c, tp, B, local_T, l, policy);
  }
  return (context_floats(c, tp, B, local_T, policy, local_units, compute) +
          workspace_floats(c, tp, B, local_T, loss_chunk_rows, policy, compute) + moe) *
         4;
}

int64_t Transformer::predict_local_row_activation_bytes(const ModelConfig& c, int B, int T, const ActivationLayout& tp) {
  T /= tp.cp.size;
  const int64_t Nl = tp.local_rows(int64_t{B} * T), C = c.d_model;
  // Residual stream, block statistics and x_mid, final norm statistics, residual gradient.
  return ((c.n_layer + 1) * Nl * C + c.n_layer * block_local_row_floats(c, tp, B, T) + 2 * Nl + Nl * C) * 4;
}

void Transformer::prepare(MicroBatchContext& ctx, const int32_t* inputs, const int32_t* targets, int B, int T,
                          float grad_scale, bool forward_only) {
  ActivationLayout layout = tp_->layout();
  if (ctx.sequence.active()) {
    const int k = ctx.sequence.count, chunk = T / k;
    NDT_CHECK(T % k == 0 && !cp_->layout().active() && !separator_,
              "sequence chunks: parallel.pp_seq_chunks = {} needs seq_len ({}) divisible by it, parallel.cp = 1 "
              "(got {}) and no document boundaries",
              k, T, cp_->layout().size);
    layout.seq_chunks = k;
    prepare_split(ctx, inputs, targets, B, T, grad_scale, forward_only, layout,
                  {TokenRun{0, chunk, ctx.sequence.index * chunk}});
    return;
  }
  layout.cp = cp_->layout();
  prepare_split(ctx, inputs, targets, B, T, grad_scale, forward_only, layout,
                layout.cp.runs(layout.cp.active() ? cp_->rank() : 0, T));
}

void Transformer::prepare_split(MicroBatchContext& ctx, const int32_t* inputs, const int32_t* targets, int B, int T,
                                float grad_scale, bool forward_only, const ActivationLayout& layout,
                                const std::vector<TokenRun>& runs) {
  int local_T = 0;
  for (const TokenRun& run : runs) local_T += run.count;
  carve_context(ctx, config_, layout, B, local_T, checkpointing_, local_units_, precision_.compute);
  workspace_.fit(ctx);
  // The documents of the whole rows (every rank finds the same), then each sequence's
  // runs in local row order: tokens, targets and their positions (in the sequence, or
  // from their document's start).
  if (separator_) {
    ctx.document_starts = document_starts(inputs, B, T, *separator_);
  } else {
    ctx.document_starts.clear();
  }
  const int64_t N = ctx.rows();
  ctx.inputs.resize(static_cast<size_t>(N));
  ctx.targets.resize(targets ? static_cast<size_t>(N) : 0);
  ctx.positions.resize(static_cast<size_t>(N));
  for (int b = 0; b < B; ++b) {
    for (const TokenRun& run : runs) {
      for (int i = 0; i < run.count; ++i) {
        const int64_t local = int64_t{b} * local_T + run.begin + i, whole = int64_t{b} * T + run.position + i;
        ctx.inputs[static_cast<size_t>(local)] = inputs[whole];
        if (targets) ctx.targets[static_cast<size_t>(local)] = targets[whole];
        const int32_t start = separator_ ? ctx.document_starts[static_cast<size_t>(whole)] : 0;
        ctx.positions[static_cast<size_t>(local)] = run.position + i - start;
      }
    }
  }
  ctx.grad_scale = grad_scale;
  ctx.forward_only = forward_only;
  ctx.loss_sum = 0;
  ctx.z_loss_sum = 0;
}

double run_forward_backward(Transformer& model, MicroBatchContext& ctx, ModelHooks* hooks) {
  NDT_CHECK(!ctx.forward_only, "run_forward_backward on a forward-only context");
  NDT_CHECK(model.store().has_grads() || hooks != nullptr,
            "forward_backward needs gradient storage: call store().zero_grads() first");
  const int units = model.num_units();
  for (int u = 0; u < units; ++u) {
    if (hooks) hooks->before_forward(u);
    model.unit(u).forward(ctx);
    if (hooks) hooks->after_forward(u);
  }
  for (int u = units - 1; u >= 0; --u) {
    if (hooks) hooks->before_backward(u);
    model.unit(u).backward(ctx, hooks);
    if (hooks) hooks->after_backward(u);
  }
  return ctx.loss_sum / static_cast<double>(ctx.rows());
}

double run_forward(Transformer& model, MicroBatchContext& ctx, ModelHooks* hooks) {
  NDT_CHECK(ctx.forward_only, "run_forward needs a forward-only context");
  for (int u = 0; u < model.num_units(); ++u) {
    if (hooks) hooks->before_forward(u);
    model.unit(u).forward(ctx);
    if (hooks) hooks->after_forward(u);
  }
  if (hooks) hooks->after_forward_only();
  return ctx.loss_sum / static_cast<double>(ctx.rows());
}

double Transformer::forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T, float grad_scale) {
  prepare(own_, inputs, targets, B, T, grad_scale, /*forward_only=*/false);
  return run_forward_backward(*this, own_, hooks_);
}

double Transformer::evaluate(const int32_t* inputs, const int32_t* targets, int B, int T) {
  prepare(own_, inputs, targets, B, T, 0.0f, /*forward_only=*/true);
  return run_forward(*this, own_, hooks_);
}

void Transformer::next_token_logits(const int32_t* tokens, int T, float* logits) {
  // Sequence parallel splits tokens over tp: pad the sequence to a multiple of tp at
  // the end (causal attention: later tokens do not change earlier positions).
  int padded = T;
  std::vector<int32_t> buffer;
  const int tp = tp_->size();
  if (tp_->splits_rows() && T % tp != 0) {
    padded = (T / tp + 1) * tp;
    NDT_CHECK(padded <= config_.max_seq_len,
              "generation under sequence parallel pads {} tokens to {}, beyond model.max_seq_len = {}", T, padded,
              config_.max_seq_len);
    buffer.assign(tokens, tokens + T);
    buffer.resize(static_cast<size_t>(padded), 0);
    tokens = buffer.data();
  }
  // Whole sequences: every context-parallel rank generates the same tokens alone.
  prepare_split(own_, tokens, nullptr, 1, padded, 0.0f, /*forward_only=*/true, tp_->layout(), {TokenRun{0, padded, 0}});
  for (int u = 0; u < num_units(); ++u) {
    if (hooks_) hooks_->before_forward(u);
    unit(u).forward(own_);
    if (u == num_units() - 1) head_->row_logits(own_, T - 1, logits);  // while the head is in use
    if (hooks_) hooks_->after_forward(u);
  }
  if (hooks_) hooks_->after_forward_only();
}

}  // namespace ndt
