#include "model/transformer.h"

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"

#include <algorithm>

namespace ndt {

namespace {

// Floats of the forward arena (residual stream, block activations, final norm,
// per-token losses) and of the backward arena (block scratch, residual gradient,
// final norm gradient, one logits chunk), for B x T.
int64_t forward_arena_floats(const ModelConfig& c, int B, int T) {
  const int64_t N = int64_t{B} * T, C = c.d_model;
  return (c.n_layer + 1) * N * C + c.n_layer * block_activation_floats(c, B, T) + N * C + 3 * N;
}

int64_t backward_arena_floats(const ModelConfig& c, int B, int T, int chunk_rows) {
  const int64_t N = int64_t{B} * T, C = c.d_model;
  return block_scratch_floats(c, B, T) + 2 * N * C + std::min<int64_t>(chunk_rows, N) * c.vocab_size;
}

}  // namespace

std::vector<ParameterSpec> model_parameter_specs(const ModelConfig& c) {
  c.validate();
  const int64_t C = c.d_model;
  std::vector<ParameterSpec> specs;
  specs.push_back({"wte.weight", {c.vocab_size, C}, InitKind::normal, c.init_std, false});
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
    specs.push_back({"lm_head.weight", {c.vocab_size, C}, InitKind::normal, c.init_std, true});
  }
  return specs;
}

int64_t count_parameters(const ModelConfig& config) {
  int64_t n = 0;
  for (const ParameterSpec& s : model_parameter_specs(config)) n += shape_numel(s.logical_shape);
  return n;
}

Transformer::Transformer(const ModelConfig& config, uint64_t seed, int loss_chunk_rows, bool materialize_parameters)
    : config_(config),
      store_(model_parameter_specs(config), seed, materialize_parameters),
      loss_chunk_rows_(loss_chunk_rows) {
  NDT_CHECK(loss_chunk_rows > 0, "train.loss_chunk_rows = {} must be positive", loss_chunk_rows);
  for (int l = 0; l < config_.n_layer; ++l) blocks_.emplace_back(config_, l, store_);
  wte_ = &store_.get("wte.weight");
  if (config_.arch == Arch::gpt2) wpe_ = &store_.get("wpe.weight");
  lnf_w_ = &store_.get("lnf.weight");
  if (config_.has_bias()) lnf_b_ = &store_.get("lnf.bias");
  if (!config_.tied_embeddings) lm_head_ = &store_.get("lm_head.weight");
}

const Parameter& Transformer::head_weight() const { return lm_head_ ? *lm_head_ : *wte_; }

int64_t Transformer::matmul_params() const {
  int64_t n = store_.numel();
  if (wpe_) n -= wpe_->numel();
  if (lm_head_) n -= wte_->numel();
  return n;
}

double Transformer::flops_per_token(int T) const {
  return 6.0 * static_cast<double>(matmul_params()) +
         12.0 * config_.n_layer * config_.d_model * static_cast<double>(T);
}

int64_t Transformer::predict_activation_bytes(const ModelConfig& c, int B, int T, int loss_chunk_rows) {
  return (forward_arena_floats(c, B, T) + backward_arena_floats(c, B, T, loss_chunk_rows)) * 4;
}

void Transformer::ensure_workspace(int B, int T) {
  NDT_CHECK(B > 0 && T > 0, "batch of {} rows x {} tokens is empty", B, T);
  NDT_CHECK(T <= config_.max_seq_len, "sequence length {} exceeds model.max_seq_len = {}", T,
            config_.max_seq_len);
  const int64_t fwd = forward_arena_floats(config_, B, T);
  const int64_t bwd = backward_arena_floats(config_, B, T, loss_chunk_rows_);
  if (!acts_arena_.defined() || acts_arena_.numel() < fwd) {
    acts_arena_ = Tensor();  // free before allocating the larger one
    acts_arena_ = Tensor::empty({fwd}, DType::f32, MemTag::activations);
  }
  if (!scratch_arena_.defined() || scratch_arena_.numel() < bwd) {
    scratch_arena_ = Tensor();
    scratch_arena_ = Tensor::empty({bwd}, DType::f32, MemTag::activations);
  }
  const int64_t N = int64_t{B} * T, C = config_.d_model;
  float* p = acts_arena_.data<float>();
  residual_.assign(config_.n_layer + 1, nullptr);
  for (auto& r : residual_) r = p, p += N * C;
  acts_.clear();
  const int64_t per_block = block_activation_floats(config_, B, T);
  for (int l = 0; l < config_.n_layer; ++l) {
    acts_.push_back(carve_block_activations(config_, B, T, p));
    p += per_block;
  }
  lnf_ = p, p += N * C;
  lnf_mean_ = p, p += N;
  lnf_rstd_ = p, p += N;
  losses_ = p;

  float* s = scratch_arena_.data<float>();
  scratch_ = carve_block_scratch(config_, B, T, s);
  s += block_scratch_floats(config_, B, T);
  dres_ = s, s += N * C;
  dlnf_ = s, s += N * C;
  logits_ = s;

  positions_.resize(N);
  for (int64_t i = 0; i < N; ++i) positions_[i] = static_cast<int32_t>(i % T);
}

void Transformer::forward(const int32_t* inputs, int B, int T) {
  ensure_workspace(B, T);
  if (hooks_) hooks_->before_forward(ModelHooks::kRootUnit);
  const int N = B * T, C = config_.d_model;
  for (int i = 0; i < N; ++i) {
    NDT_CHECK(inputs[i] >= 0 && inputs[i] < config_.vocab_size,
              "token {} at position {} is outside the vocabulary [0, {})", inputs[i], i,
              config_.vocab_size);
  }
  cpu::embedding_forward(residual_[0], inputs, wte_->data(), N, C, false);
  if (wpe_) cpu::embedding_forward(residual_[0], positions_.data(), wpe_->data(), N, C, true);
  for (int l = 0; l < config_.n_layer; ++l) {
    if (hooks_) hooks_->before_forward(l);
    blocks_[l].forward(residual_[l], residual_[l + 1], acts_[l], B, T);
    if (hooks_) hooks_->after_forward(l);
  }
  norm_forward(config_, lnf_, lnf_mean_, lnf_rstd_, residual_.back(), *lnf_w_, lnf_b_, N);
}

double Transformer::head_loss(const int32_t* targets, int N, float grad_scale, bool backward) {
  const int C = config_.d_model, V = config_.vocab_size;
  const Parameter& w = head_weight();
  if (backward) cpu::zero(dlnf_, int64_t{N} * C);
  for (int r0 = 0; r0 < N; r0 += loss_chunk_rows_) {
    const int rows = std::min(loss_chunk_rows_, N - r0);
    cpu::linear_forward(logits_, lnf_ + int64_t{r0} * C, w.data(), nullptr, rows, C, V);
    cpu::softmax_cross_entropy(logits_, losses_ + r0, targets + r0, rows, V,
                               backward ? grad_scale : 0.0f);
    if (backward) {
      cpu::linear_backward(dlnf_ + int64_t{r0} * C, w.grad_data(), nullptr, logits_,
                           lnf_ + int64_t{r0} * C, w.data(), rows, C, V);
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
  const int N = B * T, C = config_.d_model;
  if (hooks_) hooks_->before_backward(ModelHooks::kRootUnit);
  const double loss_sum = head_loss(targets, N, grad_scale, true);

  cpu::zero(dres_, int64_t{N} * C);
  norm_backward(config_, dres_, *lnf_w_, lnf_b_, dlnf_, residual_.back(), lnf_mean_, lnf_rstd_, N);
  // The arena holds [embeddings, blocks 0..L-1, final norm, output layer]; backward
  // finishes them from the end. A tied output layer is the embedding, final last.
  if (hooks_) hooks_->grads_ready_from(lnf_w_->arena_offset);
  for (int l = config_.n_layer - 1; l >= 0; --l) {
    if (hooks_) hooks_->before_backward(l);
    blocks_[l].backward(dres_, residual_[l], acts_[l], scratch_, B, T, hooks_);
    if (hooks_) hooks_->after_backward(l), hooks_->grads_ready_from(blocks_[l].first_arena_offset());
  }
  cpu::embedding_backward(wte_->grad_data(), dres_, inputs, N, C);
  if (wpe_) cpu::embedding_backward(wpe_->grad_data(), dres_, positions_.data(), N, C);
  if (hooks_) hooks_->grads_ready_from(0), hooks_->after_backward(ModelHooks::kRootUnit);
  return loss_sum / N;
}

double Transformer::evaluate(const int32_t* inputs, const int32_t* targets, int B, int T) {
  forward(inputs, B, T);
  const double loss = head_loss(targets, B * T, 0.0f, false) / (B * T);
  if (hooks_) hooks_->after_forward(ModelHooks::kRootUnit);
  return loss;
}

void Transformer::next_token_logits(const int32_t* tokens, int T, float* logits) {
  forward(tokens, 1, T);
  const int C = config_.d_model;
  cpu::linear_forward(logits, lnf_ + int64_t{T - 1} * C, head_weight().data(), nullptr, 1, C,
                      config_.vocab_size);
  if (hooks_) hooks_->after_forward(ModelHooks::kRootUnit);
}

}  // namespace ndt
