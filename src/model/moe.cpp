#include "model/moe.h"

#include "core/error.h"
#include "kernels/kernels.h"
#include "model/context_parallel_attention.h"
#include "model/expert_matmul.h"

#include <algorithm>
#include <cmath>

namespace ndt {

void MoeStats::add(const MoeStats& other) {
  if (tokens_per_expert.size() < other.tokens_per_expert.size()) {
    tokens_per_expert.resize(other.tokens_per_expert.size(), 0);
  }
  for (size_t e = 0; e < other.tokens_per_expert.size(); ++e) tokens_per_expert[e] += other.tokens_per_expert[e];
  assignments += other.assignments;
  dropped += other.dropped;
  expert_rows += other.expert_rows;
  most_loaded_rows += other.most_loaded_rows;
}

void append_moe_parameter_specs(std::vector<ParameterSpec>& specs, const ModelConfig& c, int layer) {
  const std::string p = "blocks." + std::to_string(layer) + ".moe.";
  const int64_t E = c.n_experts, C = c.d_model, F = c.expert_d_ff();
  const float residual_std = c.init_std / std::sqrt(2.0f * c.n_layer);
  // Replicated over tp, and used inside the region: every tp rank computes the same
  // logits, but the gradient reaching them through its slice of the experts is partial.
  specs.push_back({p + "router.weight", {E, C}, InitKind::normal, c.init_std, true, -1, true});
  auto expert = [&](const std::string& name, const Shape& shape, float init_std, int tp_dim) {
    ParameterSpec s{p + "experts." + name + ".weight", shape, InitKind::normal, init_std, true, tp_dim};
    s.expert = true;
    specs.push_back(s);
  };
  const bool gpt2 = c.arch == Arch::gpt2;
  expert(gpt2 ? "fc" : "gate", {E, F, C}, c.init_std, 1);  // column-parallel: hidden units over tp
  if (!gpt2) expert("up", {E, F, C}, c.init_std, 1);
  expert(gpt2 ? "proj" : "down", {E, C, F}, residual_std, 2);  // row-parallel
}

int64_t moe_expert_capacity(const ModelConfig& c, int64_t seq_len) {
  if (c.moe_capacity_factor <= 0) return seq_len;
  const double capacity =
      std::ceil(static_cast<double>(c.moe_capacity_factor) * static_cast<double>(seq_len) * c.moe_top_k / c.n_experts);
  return capacity >= static_cast<double>(seq_len) ? seq_len : static_cast<int64_t>(capacity);
}

int64_t moe_idle_expert_params(const ModelConfig& c) {
  const int64_t matrices = c.arch == Arch::gpt2 ? 2 : 3;  // fc, proj / gate, up, down
  return int64_t{c.n_experts - c.moe_top_k} * matrices * c.expert_d_ff() * c.d_model;
}

void check_moe_precision(const ModelConfig& c, const Precision& precision) {
  NDT_CHECK(!c.is_moe() || !precision.fp8,
            "model.n_experts = {} (mixture of experts) with precision.fp8 = true is not supported: the routed "
            "experts' weights [n_experts, F, C] would need a scale per expert, and the fp8 linears scale each 2-D "
            "weight as a whole (use precision.fp8 = false: the experts then compute in bf16)",
            c.n_experts);
}

MoeLayer::MoeLayer(const ModelConfig& config, const Parameter* router, const Parameter* gate, const Parameter* up,
                   const Parameter* down)
    : c_(&config), router_(router), gate_(gate), up_(up), down_(down) {}

namespace {

Tensor activations(int64_t rows, int64_t width) {
  return Tensor::empty({rows * width}, DType::f32, MemTag::activations);
}

// Scores of one token's logits: softmax or sigmoid; lse: the logits' log-sum-exp.
void token_scores(MoeScore kind, const float* logits, int E, float* score, float* softmax, double* lse) {
  float m = logits[0];
  for (int e = 1; e < E; ++e) m = std::max(m, logits[e]);
  double sum = 0;
  for (int e = 0; e < E; ++e) sum += std::exp(static_cast<double>(logits[e] - m));
  *lse = m + std::log(sum);
  for (int e = 0; e < E; ++e) softmax[e] = static_cast<float>(std::exp(static_cast<double>(logits[e] - m)) / sum);
  for (int e = 0; e < E; ++e) {
    score[e] = kind == MoeScore::softmax ? softmax[e] : 1.0f / (1.0f + std::exp(-logits[e]));
  }
}

// Each token's top-k experts and their weights into a.expert and a.weight; per sequence
// b of the batch, the choice counts (sums[b, E]) and normalised score sums (sums[B + b, E])
// the load-balancing loss reads. Returns the sum over tokens of logsumexp(logits)^2.
double choose_top_k(const ModelConfig& c, const float* logits, int64_t N, int T, int B, MoeActivations& a,
                    std::vector<float>& sums) {
  const kernels::ProfileScope timed(kernels::OpClass::moe_routing);  // no kernel is called inside
  const int E = c.n_experts, k = c.moe_top_k;
  a.expert.assign(static_cast<size_t>(N * k), 0);
  a.weight.assign(static_cast<size_t>(N * k), 0.0f);
  std::vector<float> score(static_cast<size_t>(E)), softmax(static_cast<size_t>(E));
  double z = 0;
  for (int64_t t = 0; t < N; ++t) {
    double lse = 0;
    token_scores(c.moe_score, logits + t * E, E, score.data(), softmax.data(), &lse);
    z += lse * lse;
    int32_t* chosen = a.expert.data() + t * k;
    float* w = a.weight.data() + t * k;
    float chosen_sum = 0;
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        if (std::find(chosen, chosen + j, e) != chosen + j) continue;
        if (best < 0 || score[e] > score[best]) best = e;
      }
      chosen[j] = best;
      w[j] = score[best];
      chosen_sum += w[j];
    }
    if (c.moe_normalize_top_k) {
      for (int j = 0; j < k; ++j) w[j] /= chosen_sum;
    }
    const int64_t b = t / T;
    float* counts = sums.data() + b * E;
    float* score_sums = sums.data() + int64_t{B} * E + b * E;
    for (int j = 0; j < k; ++j) counts[chosen[j]] += 1.0f;
    float total = 0;
    for (int e = 0; e < E; ++e) total += score[e];
    for (int e = 0; e < E; ++e) score_sums[e] += c.moe_score == MoeScore::softmax ? score[e] : score[e] / total;
  }
  return z;
}

// Switch's load-balancing term, summed over the B sequences (E x sum_e f_e P_e each, of
// whole sequences of whole_T tokens); each sequence's f into a.frac.
double load_balance_loss(const ModelConfig& c, const std::vector<float>& sums, int B, int64_t whole_T, MoeActivations& a) {
  const int E = c.n_experts, k = c.moe_top_k;
  a.frac.assign(static_cast<size_t>(B * E), 0.0f);
  double aux = 0;
  for (int b = 0; b < B; ++b) {
    double sequence = 0;
    for (int e = 0; e < E; ++e) {
      const double f = sums[static_cast<size_t>(b * E + e)] / static_cast<double>(whole_T * k);
      const double P = sums[static_cast<size_t>(int64_t{B} * E + b * E + e)] / static_cast<double>(whole_T);
      a.frac[static_cast<size_t>(b * E + e)] = static_cast<float>(f);
      sequence += f * P;
    }
    aux += E * sequence;
  }
  return aux;
}

// Capacity: choices admitted in position order, per sequence (the local rows of a
// sequence are in position order without cp); a.row: each admitted choice's row on the
// token side, grouped by expert, each expert's rows in token order (-1: dropped).
// Returns the rows each expert keeps; adds the dropped choices to *dropped.
std::vector<int64_t> admit_by_capacity(const ModelConfig& c, int64_t N, int T, int64_t whole_T, MoeActivations& a,
                                       int64_t* dropped) {
  const int E = c.n_experts, k = c.moe_top_k;
  const int64_t capacity = moe_expert_capacity(c, whole_T);
  std::vector<int64_t> kept(static_cast<size_t>(E), 0), in_sequence(static_cast<size_t>(E), 0);
  a.row.assign(static_cast<size_t>(N * k), -1);
  for (int64_t t = 0; t < N; ++t) {
    if (t % T == 0) std::fill(in_sequence.begin(), in_sequence.end(), 0);
    for (int j = 0; j < k; ++j) {
      const int e = a.expert[static_cast<size_t>(t * k + j)];
      if (in_sequence[static_cast<size_t>(e)] >= capacity) {
        ++*dropped;
        continue;
      }
      ++in_sequence[static_cast<size_t>(e)];
      a.row[static_cast<size_t>(t * k + j)] = kept[static_cast<size_t>(e)]++;  // rank within its expert, for now
    }
  }
  std::vector<int64_t> first(static_cast<size_t>(E), 0);
  for (int e = 1; e < E; ++e) first[static_cast<size_t>(e)] = first[static_cast<size_t>(e - 1)] + kept[static_cast<size_t>(e - 1)];
  for (int64_t i = 0; i < N * k; ++i) {
    if (a.row[static_cast<size_t>(i)] >= 0) a.row[static_cast<size_t>(i)] += first[static_cast<size_t>(a.expert[static_cast<size_t>(i)])];
  }
  return kept;
}

}  // namespace

void MoeLayer::route(MoeActivations& a, const MoeBatch& batch, const float* x, double* aux_sum, double* z_sum,
                     MoeStats* stats) const {
  const ModelConfig& c = *c_;
  const int E = c.n_experts, k = c.moe_top_k, C = c.d_model, B = batch.B, T = batch.T;
  const int64_t N = int64_t{B} * T, whole_T = int64_t{T} * batch.cp;
  NDT_CHECK(c.moe_capacity_factor == 0 || batch.cp == 1,
            "model.moe_capacity_factor = {} with parallel.cp = {} is not supported: capacity admits a sequence's "
            "tokens in position order, which a split sequence does not have on one rank",
            c.moe_capacity_factor, batch.cp);
  a.logits = activations(N, E);
  float* logits = a.logits.data<float>();
  kernels::linear_forward(logits, x, router_->data(), nullptr, static_cast<int>(N), C, E);

  std::vector<float> sums(static_cast<size_t>(2 * B * E), 0.0f);  // [B, E] counts, then [B, E] score sums
  const double z = choose_top_k(c, logits, N, T, B, a, sums);
  if (batch.cp > 1) cp_->sum_over_ranks(sums.data(), static_cast<int64_t>(sums.size()));
  const double aux = load_balance_loss(c, sums, B, whole_T, a);
  // In token-loss units: this rank's T of each sequence's whole_T tokens carry the
  // sequence's term (the cp ranks' shares add up to it).
  if (aux_sum) *aux_sum += c.moe_aux_loss * static_cast<double>(T) * aux;
  if (z_sum) *z_sum += c.moe_z_loss * z;

  int64_t dropped = 0;
  const std::vector<int64_t> kept = admit_by_capacity(c, N, T, whole_T, a, &dropped);
  a.route = ExpertRoute{};
  a.route.send_counts = kept;
  dispatch_->plan(a.route);
  if (stats) {
    if (stats->tokens_per_expert.size() < static_cast<size_t>(E)) stats->tokens_per_expert.resize(static_cast<size_t>(E), 0);
    for (int e = 0; e < E; ++e) stats->tokens_per_expert[static_cast<size_t>(e)] += kept[static_cast<size_t>(e)];
    stats->assignments += N * k;
    stats->dropped += dropped;
    stats->expert_rows += a.route.expert_rows();
    stats->most_loaded_rows += a.route.most_loaded_rows;
  }
}

void MoeLayer::experts_forward(MoeActivations& a) const {
  const ExpertRoute& r = a.route;
  const int64_t R = r.expert_rows(), C = c_->d_model, F = gate_->local_shape[1];
  a.hidden = activations(R, F);
  a.act = activations(R, F);
  a.up = up_ ? activations(R, F) : Tensor();
  Tensor outputs = activations(R, C);
  {
    const ExpertOperand in(compute_, a.inputs.data<float>(), R * C);  // rounded once for gate and up
    experts_linear_forward(r, a.hidden.data<float>(), in, *gate_);
    if (up_) experts_linear_forward(r, a.up.data<float>(), in, *up_);
  }
  if (up_) {
    kernels::swiglu_forward(a.act.data<float>(), a.hidden.data<float>(), a.up.data<float>(), R * F);
  } else {
    kernels::gelu_forward(a.act.data<float>(), a.hidden.data<float>(), R * F);
  }
  experts_linear_forward(r, outputs.data<float>(), ExpertOperand(compute_, a.act.data<float>(), R * F), *down_);
  a.outputs = activations(r.token_rows(), C);
  dispatch_->from_experts(r, outputs.data<float>(), a.outputs.data<float>(), C);
}

void MoeLayer::forward(MoeActivations& a, const MoeBatch& batch, const float* x, float* out, double* aux_sum,
                       double* z_sum, MoeStats* stats) const {
  const int k = c_->moe_top_k;
  const int64_t C = c_->d_model, N = int64_t{batch.B} * batch.T;
  Tensor rounded;
  if (compute_ != DType::f32) {  // what backward reads of x (module comment)
    rounded = activations(N, C);
    kernels::copy(rounded.data<float>(), x, N * C);
    kernels::round_to_lowp(compute_, rounded.data<float>(), N * C);
    x = rounded.data<float>();
  }
  route(a, batch, x, aux_sum, z_sum, stats);
  // Dispatch: each kept slot's token row, grouped by expert, to the rank holding it.
  Tensor rows = activations(a.route.token_rows(), C);
  kernels::moe_dispatch_rows(rows.data<float>(), x, a.row.data(), N, k, C);
  a.inputs = activations(a.route.expert_rows(), C);
  dispatch_->to_experts(a.route, rows.data<float>(), a.inputs.data<float>(), C);
  rows = Tensor();
  experts_forward(a);
  kernels::moe_combine(out, a.outputs.data<float>(), a.row.data(), a.weight.data(), N, k, C);
}

void MoeLayer::experts_backward(MoeActivations& a, const float* doutputs, float* dinputs) const {
  const ExpertRoute& r = a.route;
  const int64_t R = r.expert_rows(), C = c_->d_model, F = gate_->local_shape[1];
  Tensor dact = Tensor::zeros({R * F}, DType::f32, MemTag::activations);
  Tensor dhidden = Tensor::zeros({R * F}, DType::f32, MemTag::activations);
  Tensor dup = up_ ? Tensor::zeros({R * F}, DType::f32, MemTag::activations) : Tensor();
  experts_linear_backward(r, dact.data<float>(), ExpertOperand(compute_, doutputs, R * C),
                          ExpertOperand(compute_, a.act.data<float>(), R * F), *down_);
  if (up_) {
    kernels::swiglu_backward(dhidden.data<float>(), dup.data<float>(), dact.data<float>(), a.hidden.data<float>(),
                             a.up.data<float>(), R * F);
  } else {
    kernels::gelu_backward(dhidden.data<float>(), a.hidden.data<float>(), dact.data<float>(), R * F);
  }
  dact = Tensor();
  const ExpertOperand in(compute_, a.inputs.data<float>(), R * C);  // rounded once for gate and up
  experts_linear_backward(r, dinputs, ExpertOperand(compute_, dhidden.data<float>(), R * F), in, *gate_);
  if (up_) experts_linear_backward(r, dinputs, ExpertOperand(compute_, dup.data<float>(), R * F), in, *up_);
}

namespace {

// The router logits' gradients dlogits [N, E]: through the combine weights (dweight
// [N, k]), the load-balancing and the z-loss terms, token by token.
void logit_gradients(const ModelConfig& c, const MoeActivations& a, const MoeBatch& batch, const float* dweight,
                     float* dlogits) {
  const kernels::ProfileScope timed(kernels::OpClass::moe_routing);  // no kernel is called inside
  const int E = c.n_experts, k = c.moe_top_k;
  const int64_t N = int64_t{batch.B} * batch.T;
  const bool aux = batch.adds_loss_gradients && c.moe_aux_loss > 0;
  const bool z = batch.adds_loss_gradients && c.moe_z_loss > 0;
  std::vector<float> score(static_cast<size_t>(E)), softmax(static_cast<size_t>(E)), ds(static_cast<size_t>(E));
  for (int64_t t = 0; t < N; ++t) {
    double lse = 0;
    token_scores(c.moe_score, a.logits.data<float>() + t * E, E, score.data(), softmax.data(), &lse);
    std::fill(ds.begin(), ds.end(), 0.0f);
    const int32_t* chosen = a.expert.data() + t * k;
    const float* w = a.weight.data() + t * k;
    const float* dw = dweight + t * k;
    if (c.moe_normalize_top_k) {
      // w_j = s_j / S, S the sum of the chosen scores (dropped slots included).
      float S = 0, dot = 0;
      for (int j = 0; j < k; ++j) S += score[static_cast<size_t>(chosen[j])], dot += dw[j] * w[j];
      for (int j = 0; j < k; ++j) ds[static_cast<size_t>(chosen[j])] += (dw[j] - dot) / S;
    } else {
      for (int j = 0; j < k; ++j) ds[static_cast<size_t>(chosen[j])] += dw[j];
    }
    if (aux) {
      // d(objective)/d(normalised score of e) = grad_scale x coefficient x E x f_se.
      const float* f = a.frac.data() + (t / batch.T) * E;
      const float g = batch.grad_scale * c.moe_aux_loss * static_cast<float>(E);
      if (c.moe_score == MoeScore::softmax) {
        for (int e = 0; e < E; ++e) ds[static_cast<size_t>(e)] += g * f[e];
      } else {
        float total = 0, dot = 0;
        for (int e = 0; e < E; ++e) total += score[static_cast<size_t>(e)];
        for (int e = 0; e < E; ++e) dot += g * f[e] * score[static_cast<size_t>(e)] / total;
        for (int e = 0; e < E; ++e) ds[static_cast<size_t>(e)] += (g * f[e] - dot) / total;
      }
    }
    float* dl = dlogits + t * E;
    if (c.moe_score == MoeScore::softmax) {
      float dot = 0;
      for (int e = 0; e < E; ++e) dot += ds[static_cast<size_t>(e)] * score[static_cast<size_t>(e)];
      for (int e = 0; e < E; ++e) dl[e] = score[static_cast<size_t>(e)] * (ds[static_cast<size_t>(e)] - dot);
    } else {
      for (int e = 0; e < E; ++e) {
        const float s = score[static_cast<size_t>(e)];
        dl[e] = ds[static_cast<size_t>(e)] * s * (1.0f - s);
      }
    }
    if (z) {
      const float g = batch.grad_scale * c.moe_z_loss * 2.0f * static_cast<float>(lse);
      for (int e = 0; e < E; ++e) dl[e] += g * softmax[static_cast<size_t>(e)];
    }
  }
}

}  // namespace

void MoeLayer::router_backward(MoeActivations& a, const MoeBatch& batch, const float* x, const float* dweight,
                               float* drouter, float* dx) const {
  const int E = c_->n_experts, C = c_->d_model;
  const int64_t N = int64_t{batch.B} * batch.T;
  Tensor dlogits_t = activations(N, E);
  float* dlogits = dlogits_t.data<float>();
  logit_gradients(*c_, a, batch, dweight, dlogits);
  kernels::linear_backward(dx, drouter, nullptr, dlogits, x, router_->data(), static_cast<int>(N), C, E);
}

void MoeLayer::backward(MoeActivations& a, const MoeBatch& batch, const float* x, const float* dout, float* drouter,
                        float* dx) const {
  const int k = c_->moe_top_k;
  const int64_t C = c_->d_model, N = int64_t{batch.B} * batch.T;
  const ExpertRoute& r = a.route;
  // Combine: the weights' gradients (partial sums under tp, as the outputs are) and the
  // token-side output gradients.
  std::vector<float> dweight(static_cast<size_t>(N * k), 0.0f);
  Tensor drows = activations(r.token_rows(), C);
  kernels::moe_combine_backward(drows.data<float>(), dweight.data(), dout, a.outputs.data<float>(), a.row.data(),
                                a.weight.data(), N, k, C);
  Tensor doutputs = activations(r.expert_rows(), C);
  dispatch_->to_experts(r, drows.data<float>(), doutputs.data<float>(), C);
  Tensor dinputs = Tensor::zeros({r.expert_rows() * C}, DType::f32, MemTag::activations);
  experts_backward(a, doutputs.data<float>(), dinputs.data<float>());
  doutputs = Tensor();
  dispatch_->from_experts(r, dinputs.data<float>(), drows.data<float>(), C);
  kernels::moe_gather_add(dx, drows.data<float>(), a.row.data(), N, k, C);
  router_backward(a, batch, x, dweight.data(), drouter, dx);
}

}  // namespace ndt
