#include "model/transformer.h"

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"

#include <algorithm>

namespace ndt {

namespace {

// Floats of the forward arena (residual stream, block activations, final norm and its
// statistics, per-token losses) and of the backward arena (block scratch, residual
// gradient, final norm gradient, one logits chunk and the loss's work), for B x T.
int64_t forward_arena_floats(const ModelConfig& c, const TpLayout& tp, int B, int T) {
  const int64_t N = int64_t{B} * T, Nl = tp.local_rows(N), C = c.d_model;
  return (c.n_layer + 1) * Nl * C + c.n_layer * block_activation_floats(c, tp, B, T) + N * C + 2 * Nl + N;
}

int64_t backward_arena_floats(const ModelConfig& c, const TpLayout& tp, int B, int T, int chunk_rows) {
  const int64_t N = int64_t{B} * T, Nl = tp.local_rows(N), C = c.d_model;
  const int64_t chunk = std::min<int64_t>(chunk_rows, N);
  return block_scratch_floats(c, tp, B, T) + Nl * C + N * C + chunk * (c.vocab_size / tp.size) + 3 * chunk;
}

}  // namespace

std::vector<ParameterSpec> model_parameter_specs(const ModelConfig& c) {
  c.validate();
  const int64_t C = c.d_model;
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
  if (c.has_bias()) specs.push_back({"lnf.bias", {C}, InitKind::zeros, 0, false});
  if (!c.tied_embeddings) {
    specs.push_back({"lm_head.weight", {c.vocab_size, C}, InitKind::normal, c.init_std, true, 0});
  }
  return specs;
}

int64_t count_parameters(const ModelConfig& config) {
  int64_t n = 0;
  for (const ParameterSpec& s : model_parameter_specs(config)) n += shape_numel(s.logical_shape);
  return n;
}

Transformer::Transformer(const ModelConfig& config, uint64_t seed, int loss_chunk_rows, bool materialize_parameters,
                         const TensorParallel& tp)
    : config_(config),
      tp_(tp),
      store_(model_parameter_specs(config), seed, materialize_parameters, tp.rank(), tp.size()),
      loss_chunk_rows_(loss_chunk_rows) {
  NDT_CHECK(loss_chunk_rows > 0, "train.loss_chunk_rows = {} must be positive", loss_chunk_rows);
  validate_tensor_parallel(config_, tp.size(), false, 1);
  for (int l = 0; l < config_.n_layer; ++l) blocks_.emplace_back(config_, l, store_, tp_);
  wte_ = &store_.get("wte.weight");
  if (config_.arch == Arch::gpt2) wpe_ = &store_.get("wpe.weight");
  lnf_w_ = &store_.get("lnf.weight");
  if (config_.has_bias()) lnf_b_ = &store_.get("lnf.bias");
  if (!config_.tied_embeddings) lm_head_ = &store_.get("lm_head.weight");
  final_norm_partial_ = PartialGradients(tp_, {lnf_w_, lnf_b_});
  positions_partial_ = PartialGradients(tp_, {wpe_});
}

const Parameter& Transformer::head_weight() const { return lm_head_ ? *lm_head_ : *wte_; }

int64_t Transformer::matmul_params() const {
  auto logical = [](const Parameter* p) { return shape_numel(p->spec.logical_shape); };
  int64_t n = 0;
  for (const Parameter& p : store_.params()) n += logical(&p);
  if (wpe_) n -= logical(wpe_);
  if (lm_head_) n -= logical(wte_);
  return n;
}

double Transformer::flops_per_token(int T) const {
  return 6.0 * static_cast<double>(matmul_params()) +
         12.0 * config_.n_layer * config_.d_model * static_cast<double>(T);
}

int64_t Transformer::predict_activation_bytes(const ModelConfig& c, int B, int T, int loss_chunk_rows,
                                              const TpLayout& tp) {
  return (forward_arena_floats(c, tp, B, T) + backward_arena_floats(c, tp, B, T, loss_chunk_rows)) * 4;
}

int64_t Transformer::predict_local_row_activation_bytes(const ModelConfig& c, int B, int T, const TpLayout& tp) {
  const int64_t Nl = tp.local_rows(int64_t{B} * T), C = c.d_model;
  // Residual stream, block statistics and x_mid, final norm statistics, residual gradient.
  return ((c.n_layer + 1) * Nl * C + c.n_layer * block_local_row_floats(c, tp, B, T) + 2 * Nl + Nl * C) * 4;
}

void Transformer::ensure_workspace(int B, int T) {
  NDT_CHECK(B > 0 && T > 0, "batch of {} rows x {} tokens is empty", B, T);
  NDT_CHECK(T <= config_.max_seq_len, "sequence length {} exceeds model.max_seq_len = {}", T,
            config_.max_seq_len);
  const TpLayout tp = tp_.layout();
  NDT_CHECK(!tp.splits_rows() || (int64_t{B} * T) % tp.size == 0,
            "sequence parallel splits the {} x {} tokens of a micro-batch over parallel.tp = {}: not divisible", B, T,
            tp.size);
  const int64_t fwd = forward_arena_floats(config_, tp, B, T);
  const int64_t bwd = backward_arena_floats(config_, tp, B, T, loss_chunk_rows_);
  if (!acts_arena_.defined() || acts_arena_.numel() < fwd) {
    acts_arena_ = Tensor();  // free before allocating the larger one
    acts_arena_ = Tensor::empty({fwd}, DType::f32, MemTag::activations);
  }
  if (!scratch_arena_.defined() || scratch_arena_.numel() < bwd) {
    scratch_arena_ = Tensor();
    scratch_arena_ = Tensor::empty({bwd}, DType::f32, MemTag::activations);
  }
  const int64_t N = int64_t{B} * T, Nl = tp.local_rows(N), C = config_.d_model;
  float* p = acts_arena_.data<float>();
  residual_.assign(config_.n_layer + 1, nullptr);
  for (auto& r : residual_) r = p, p += Nl * C;
  acts_.clear();
  const int64_t per_block = block_activation_floats(config_, tp, B, T);
  for (int l = 0; l < config_.n_layer; ++l) {
    acts_.push_back(carve_block_activations(config_, tp, B, T, p));
    p += per_block;
  }
  lnf_ = p, p += N * C;
  lnf_mean_ = p, p += Nl;
  lnf_rstd_ = p, p += Nl;
  losses_ = p;

  float* s = scratch_arena_.data<float>();
  scratch_ = carve_block_scratch(config_, tp, B, T, s);
  s += block_scratch_floats(config_, tp, B, T);
  dres_ = s, s += Nl * C;
  dlnf_ = s, s += N * C;
  logits_ = s, s += std::min<int64_t>(loss_chunk_rows_, N) * (config_.vocab_size / tp.size);
  loss_work_ = s;

  positions_.resize(N);
  for (int64_t i = 0; i < N; ++i) positions_[i] = static_cast<int32_t>(i % T);
}

void Transformer::forward(const int32_t* inputs, int B, int T) {
  ensure_workspace(B, T);
  if (hooks_) hooks_->before_forward(ModelHooks::kRootUnit);
  const int64_t N = int64_t{B} * T, Nl = tp_.local_rows(N), C = config_.d_model;
  for (int64_t i = 0; i < N; ++i) {
    NDT_CHECK(inputs[i] >= 0 && inputs[i] < config_.vocab_size,
              "token {} at position {} is outside the vocabulary [0, {})", inputs[i], i,
              config_.vocab_size);
  }
  if (tp_.active()) {  // vocab-parallel lookup, summed over tp like a row-parallel output
    float* partial = tp_.splits_rows() ? scratch_.dln : residual_[0];
    vocab_parallel_embedding_forward(partial, inputs, wte_->data(), wte_->local_offset[0], wte_->local_shape[0], N, C);
    row_parallel_output_forward(tp_, partial, residual_[0], Nl, C);
  } else {
    cpu::embedding_forward(residual_[0], inputs, wte_->data(), static_cast<int>(N), static_cast<int>(C), false);
  }
  if (wpe_) {  // the positions of this rank's rows
    const int32_t* positions = positions_.data() + (tp_.splits_rows() ? tp_.rank() * Nl : 0);
    cpu::embedding_forward(residual_[0], positions, wpe_->data(), static_cast<int>(Nl), static_cast<int>(C), true);
  }
  for (int l = 0; l < config_.n_layer; ++l) {
    if (hooks_) hooks_->before_forward(l);
    blocks_[l].forward(residual_[l], residual_[l + 1], acts_[l], scratch_, B, T);
    if (hooks_) hooks_->after_forward(l);
  }
  // The final norm on the local rows; the output layer's input is all rows.
  float* lnf_local = tp_.splits_rows() ? scratch_.dln_local : lnf_;
  norm_forward(config_, lnf_local, lnf_mean_, lnf_rstd_, residual_.back(), *lnf_w_, lnf_b_, Nl);
  column_parallel_input_forward(tp_, lnf_local, lnf_, Nl, C);
}

double Transformer::head_loss(const int32_t* targets, int N, float grad_scale, bool backward) {
  const int C = config_.d_model;
  const Parameter& w = head_weight();
  const int V_local = static_cast<int>(w.local_shape[0]);
  if (backward) cpu::zero(dlnf_, int64_t{N} * C);
  for (int r0 = 0; r0 < N; r0 += loss_chunk_rows_) {
    const int rows = std::min(loss_chunk_rows_, N - r0);
    cpu::linear_forward(logits_, lnf_ + int64_t{r0} * C, w.data(), nullptr, rows, C, V_local);
    vocab_parallel_cross_entropy(tp_, logits_, losses_ + r0, targets + r0, rows, V_local, w.local_offset[0],
                                 backward ? grad_scale : 0.0f, loss_work_);
    if (backward) {
      cpu::linear_backward(dlnf_ + int64_t{r0} * C, w.grad_data(), nullptr, logits_,
                           lnf_ + int64_t{r0} * C, w.data(), rows, C, V_local);
    }
  }
  double sum = 0;
  for (int i = 0; i < N; ++i) sum += losses_[i];
  return sum;
}

double Transformer::forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                     float grad_scale) {
  NDT_CHECK(store_.has_grads() || hooks_ != nullptr,
            "forward_backward needs gradient storage: call store().zero_grads() first");
  forward(inputs, B, T);
  const int64_t N = int64_t{B} * T, Nl = tp_.local_rows(N), C = config_.d_model;
  if (hooks_) hooks_->before_backward(ModelHooks::kRootUnit);
  const double loss_sum = head_loss(targets, static_cast<int>(N), grad_scale, true);

  // dlnf holds this rank's part of the output layer's input gradient (its vocabulary).
  const float* dlnf = column_parallel_input_backward(tp_, dlnf_, scratch_.dln_local, Nl, C);
  cpu::zero(dres_, Nl * C);
  final_norm_partial_.begin();
  norm_backward(config_, dres_, final_norm_partial_.grad(lnf_w_), final_norm_partial_.grad(lnf_b_), *lnf_w_, dlnf,
                residual_.back(), lnf_mean_, lnf_rstd_, Nl);
  final_norm_partial_.finish();
  // The arena holds [embeddings, blocks 0..L-1, final norm, output layer]; backward
  // finishes them from the end. A tied output layer is the embedding, final last.
  if (hooks_) hooks_->grads_ready_from(lnf_w_->arena_offset);
  for (int l = config_.n_layer - 1; l >= 0; --l) {
    if (hooks_) hooks_->before_backward(l);
    blocks_[l].backward(dres_, residual_[l], acts_[l], scratch_, B, T, hooks_);
    if (hooks_) hooks_->after_backward(l), hooks_->grads_ready_from(blocks_[l].first_arena_offset());
  }
  if (tp_.active()) {
    const float* dres_full = row_parallel_output_backward(tp_, dres_, scratch_.dout_full, Nl, C);
    vocab_parallel_embedding_backward(wte_->grad_data(), dres_full, inputs, wte_->local_offset[0],
                                      wte_->local_shape[0], N, C);
  } else {
    cpu::embedding_backward(wte_->grad_data(), dres_, inputs, static_cast<int>(N), static_cast<int>(C));
  }
  if (wpe_) {
    positions_partial_.begin();
    const int32_t* positions = positions_.data() + (tp_.splits_rows() ? tp_.rank() * Nl : 0);
    cpu::embedding_backward(positions_partial_.grad(wpe_), dres_, positions, static_cast<int>(Nl),
                            static_cast<int>(C));
    positions_partial_.finish();
  }
  if (hooks_) hooks_->grads_ready_from(0), hooks_->after_backward(ModelHooks::kRootUnit);
  return loss_sum / static_cast<double>(N);
}

double Transformer::evaluate(const int32_t* inputs, const int32_t* targets, int B, int T) {
  forward(inputs, B, T);
  const double loss = head_loss(targets, B * T, 0.0f, false) / (B * T);
  if (hooks_) hooks_->after_forward(ModelHooks::kRootUnit);
  return loss;
}

void Transformer::next_token_logits(const int32_t* tokens, int T, float* logits) {
  // Sequence parallel splits tokens over tp: pad the sequence to a multiple of tp at
  // the end (causal attention: later tokens do not change earlier positions).
  int padded = T;
  std::vector<int32_t> buffer;
  if (tp_.splits_rows() && T % tp_.size() != 0) {
    padded = (T / tp_.size() + 1) * tp_.size();
    NDT_CHECK(padded <= config_.max_seq_len,
              "generation under sequence parallel pads {} tokens to {}, beyond model.max_seq_len = {}", T, padded,
              config_.max_seq_len);
    buffer.assign(tokens, tokens + T);
    buffer.resize(static_cast<size_t>(padded), 0);
    tokens = buffer.data();
  }
  forward(tokens, 1, padded);
  const int C = config_.d_model;
  const Parameter& w = head_weight();
  const int64_t V_local = w.local_shape[0];
  std::vector<float> local(static_cast<size_t>(V_local));
  cpu::linear_forward(local.data(), lnf_ + int64_t{T - 1} * C, w.data(), nullptr, 1, C, static_cast<int>(V_local));
  if (tp_.active()) {
    tp_.comm->all_gather(local.data(), logits, static_cast<size_t>(V_local), DType::f32);
  } else {
    std::copy(local.begin(), local.end(), logits);
  }
  if (hooks_) hooks_->after_forward(ModelHooks::kRootUnit);
}

}  // namespace ndt
