#include "model/block.h"

#include "model/transformer.h"

#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"

#include <cmath>
#include <utility>

namespace ndt {

namespace {

struct Dims {
  int64_t N, C, F, QD, KD, NH, NKV, HS;
  Dims(const ModelConfig& c, int B, int T)
      : N(int64_t{B} * T), C(c.d_model), F(c.d_ff), QD(c.d_model), KD(int64_t{c.kv_heads()} * c.head_dim()),
        NH(c.n_head), NKV(c.kv_heads()), HS(c.head_dim()) {}
};

// Hands out consecutive pieces of one float buffer; with base == nullptr it only counts.
class Carver {
 public:
  explicit Carver(float* base) : base_(base) {}
  float* take(int64_t n) {
    float* p = base_ ? base_ + used_ : nullptr;
    used_ += n;
    return p;
  }
  int64_t used() const { return used_; }

 private:
  float* base_;
  int64_t used_ = 0;
};

BlockActivations carve_acts(const ModelConfig& c, int B, int T, Carver& m) {
  Dims d(c, B, T);
  BlockActivations a;
  a.ln1 = m.take(d.N * d.C);
  if (c.arch == Arch::gpt2) a.ln1_mean = m.take(d.N);
  a.ln1_rstd = m.take(d.N);
  if (c.qk_norm) {
    a.q_pre = m.take(d.N * d.QD);
    a.k_pre = m.take(d.N * d.KD);
    a.q_rstd = m.take(d.N * d.NH);
    a.k_rstd = m.take(d.N * d.NKV);
  }
  a.q = m.take(d.N * d.QD);
  a.k = m.take(d.N * d.KD);
  a.v = m.take(d.N * d.KD);
  a.att = m.take(int64_t{B} * d.NH * T * T);
  a.lse = m.take(int64_t{B} * d.NH * T);
  a.att_out = m.take(d.N * d.QD);
  a.x_mid = m.take(d.N * d.C);
  a.ln2 = m.take(d.N * d.C);
  if (c.arch == Arch::gpt2) a.ln2_mean = m.take(d.N);
  a.ln2_rstd = m.take(d.N);
  a.ff_pre = m.take(d.N * d.F);
  if (c.arch == Arch::llama) a.ff_up = m.take(d.N * d.F);
  a.ff_act = m.take(d.N * d.F);
  return a;
}

BlockScratch carve_scratch(const ModelConfig& c, int B, int T, Carver& m) {
  Dims d(c, B, T);
  BlockScratch s;
  s.dln = m.take(d.N * d.C);
  s.dq = m.take(d.N * d.QD);
  s.dq2 = m.take(d.N * d.QD);
  s.dk = m.take(d.N * d.KD);
  s.dk2 = m.take(d.N * d.KD);
  s.dv = m.take(d.N * d.KD);
  s.datt_out = m.take(d.N * d.QD);
  s.dff_a = m.take(d.N * d.F);
  s.dff_b = m.take(d.N * d.F);
  if (c.arch == Arch::llama) s.dff_c = m.take(d.N * d.F);
  return s;
}

float* grad_or_null(const Parameter* p) { return p ? p->grad_data() : nullptr; }
const float* data_or_null(const Parameter* p) { return p ? p->data() : nullptr; }

}  // namespace

int64_t block_activation_floats(const ModelConfig& c, int B, int T) {
  Carver m(nullptr);
  carve_acts(c, B, T, m);
  return m.used();
}

int64_t block_scratch_floats(const ModelConfig& c, int B, int T) {
  Carver m(nullptr);
  carve_scratch(c, B, T, m);
  return m.used();
}

BlockActivations carve_block_activations(const ModelConfig& c, int B, int T, float* base) {
  Carver m(base);
  return carve_acts(c, B, T, m);
}

BlockScratch carve_block_scratch(const ModelConfig& c, int B, int T, float* base) {
  Carver m(base);
  return carve_scratch(c, B, T, m);
}

std::vector<ParameterSpec> block_parameter_specs(const ModelConfig& c, int layer) {
  const std::string p = "blocks." + std::to_string(layer) + ".";
  const int64_t C = c.d_model, F = c.d_ff, QD = c.d_model, KD = int64_t{c.kv_heads()} * c.head_dim();
  const float std = c.init_std;
  const float residual_std = c.init_std / std::sqrt(2.0f * c.n_layer);
  const bool bias = c.has_bias();
  std::vector<ParameterSpec> specs;
  auto norm = [&](const std::string& name) {
    specs.push_back({p + name + ".weight", {C}, InitKind::ones, 0, false});
    if (bias) specs.push_back({p + name + ".bias", {C}, InitKind::zeros, 0, false});
  };
  auto linear = [&](const std::string& name, int64_t out, int64_t in, float init_std) {
    specs.push_back({p + name + ".weight", {out, in}, InitKind::normal, init_std, true});
    if (bias) specs.push_back({p + name + ".bias", {out}, InitKind::zeros, 0, false});
  };
  norm("ln1");
  linear("attn.wq", QD, C, std);
  linear("attn.wk", KD, C, std);
  linear("attn.wv", KD, C, std);
  if (c.qk_norm) {
    specs.push_back({p + "attn.q_norm.weight", {c.head_dim()}, InitKind::ones, 0, false});
    specs.push_back({p + "attn.k_norm.weight", {c.head_dim()}, InitKind::ones, 0, false});
  }
  linear("attn.wo", C, QD, residual_std);
  norm("ln2");
  if (c.arch == Arch::gpt2) {
    linear("mlp.fc", F, C, std);
    linear("mlp.proj", C, F, residual_std);
  } else {
    linear("mlp.gate", F, C, std);
    linear("mlp.up", F, C, std);
    linear("mlp.down", C, F, residual_std);
  }
  return specs;
}

void norm_forward(const ModelConfig& c, float* out, float* mean, float* rstd, const float* inp,
                  const Parameter& weight, const Parameter* bias, int N) {
  if (c.arch == Arch::gpt2) {
    cpu::layernorm_forward(out, mean, rstd, inp, weight.data(), data_or_null(bias), N, c.d_model,
                           c.norm_eps);
  } else {
    cpu::rmsnorm_forward(out, rstd, inp, weight.data(), N, c.d_model, c.norm_eps);
  }
}

void norm_backward(const ModelConfig& c, float* dinp, const Parameter& weight,
                   const Parameter* bias, const float* dout, const float* inp, const float* mean,
                   const float* rstd, int N) {
  if (c.arch == Arch::gpt2) {
    cpu::layernorm_backward(dinp, weight.grad_data(), grad_or_null(bias), dout, inp, weight.data(),
                            mean, rstd, N, c.d_model);
  } else {
    cpu::rmsnorm_backward(dinp, weight.grad_data(), dout, inp, weight.data(), rstd, N, c.d_model);
  }
}

Block::Block(const ModelConfig& config, int layer, ParameterStore& store)
    : c_(config), prefix_("blocks." + std::to_string(layer) + ".") {
  const bool bias = c_.has_bias();
  const bool gpt2 = c_.arch == Arch::gpt2;
  ln1_w_ = find(store, "ln1.weight");
  ln1_b_ = find(store, "ln1.bias", bias);
  ln2_w_ = find(store, "ln2.weight");
  ln2_b_ = find(store, "ln2.bias", bias);
  wq_ = find(store, "attn.wq.weight");
  bq_ = find(store, "attn.wq.bias", bias);
  wk_ = find(store, "attn.wk.weight");
  bk_ = find(store, "attn.wk.bias", bias);
  wv_ = find(store, "attn.wv.weight");
  bv_ = find(store, "attn.wv.bias", bias);
  wo_ = find(store, "attn.wo.weight");
  bo_ = find(store, "attn.wo.bias", bias);
  q_norm_ = find(store, "attn.q_norm.weight", c_.qk_norm);
  k_norm_ = find(store, "attn.k_norm.weight", c_.qk_norm);
  fc_ = find(store, gpt2 ? "mlp.fc.weight" : "mlp.gate.weight");
  fc_b_ = find(store, "mlp.fc.bias", bias);
  up_ = find(store, "mlp.up.weight", !gpt2);
  proj_ = find(store, gpt2 ? "mlp.proj.weight" : "mlp.down.weight");
  proj_b_ = find(store, "mlp.proj.bias", bias);
}

const Parameter* Block::find(ParameterStore& store, const std::string& suffix, bool required) {
  if (!required) return nullptr;
  return &store.get(prefix_ + suffix);
}

void Block::forward(const float* x_in, float* x_out, BlockActivations& a, int B, int T) const {
  const Dims d(c_, B, T);
  const int N = static_cast<int>(d.N);
  norm_forward(c_, a.ln1, a.ln1_mean, a.ln1_rstd, x_in, *ln1_w_, ln1_b_, N);

  float* q_dst = c_.qk_norm ? a.q_pre : a.q;
  float* k_dst = c_.qk_norm ? a.k_pre : a.k;
  cpu::linear_forward(q_dst, a.ln1, wq_->data(), data_or_null(bq_), N, d.C, d.QD);
  cpu::linear_forward(k_dst, a.ln1, wk_->data(), data_or_null(bk_), N, d.C, d.KD);
  cpu::linear_forward(a.v, a.ln1, wv_->data(), data_or_null(bv_), N, d.C, d.KD);
  if (c_.qk_norm) {
    cpu::rmsnorm_forward(a.q, a.q_rstd, a.q_pre, q_norm_->data(), N * d.NH, d.HS, c_.norm_eps);
    cpu::rmsnorm_forward(a.k, a.k_rstd, a.k_pre, k_norm_->data(), N * d.NKV, d.HS, c_.norm_eps);
  }
  if (c_.arch == Arch::llama) {
    cpu::rope_forward(a.q, a.q, B, T, d.NH, d.HS, 0, c_.rope_theta);
    cpu::rope_forward(a.k, a.k, B, T, d.NKV, d.HS, 0, c_.rope_theta);
  }
  cpu::attention_forward(a.att_out, a.lse, a.att, a.q, a.k, a.v, B, T, d.NH, d.NKV, d.HS);
  cpu::linear_forward(a.x_mid, a.att_out, wo_->data(), data_or_null(bo_), N, d.QD, d.C);
  cpu::add_inplace(a.x_mid, x_in, d.N * d.C);

  norm_forward(c_, a.ln2, a.ln2_mean, a.ln2_rstd, a.x_mid, *ln2_w_, ln2_b_, N);
  cpu::linear_forward(a.ff_pre, a.ln2, fc_->data(), data_or_null(fc_b_), N, d.C, d.F);
  if (c_.arch == Arch::gpt2) {
    cpu::gelu_forward(a.ff_act, a.ff_pre, d.N * d.F);
  } else {
    cpu::linear_forward(a.ff_up, a.ln2, up_->data(), nullptr, N, d.C, d.F);
    cpu::swiglu_forward(a.ff_act, a.ff_pre, a.ff_up, d.N * d.F);
  }
  cpu::linear_forward(x_out, a.ff_act, proj_->data(), data_or_null(proj_b_), N, d.F, d.C);
  cpu::add_inplace(x_out, a.x_mid, d.N * d.C);
}

void Block::backward(float* dres, const float* x_in, const BlockActivations& a, BlockScratch& s,
                     int B, int T, ModelHooks* hooks) const {
  const Dims d(c_, B, T);
  const int N = static_cast<int>(d.N);
  auto poll = [hooks] {
    if (hooks) hooks->poll();
  };

  // MLP: dres is dL/dx_out, which is also dL/d(mlp output).
  cpu::zero(s.dff_a, d.N * d.F);
  cpu::linear_backward(s.dff_a, proj_->grad_data(), grad_or_null(proj_b_), dres, a.ff_act,
                       proj_->data(), N, d.F, d.C);
  poll();
  cpu::zero(s.dff_b, d.N * d.F);
  cpu::zero(s.dln, d.N * d.C);
  if (c_.arch == Arch::gpt2) {
    cpu::gelu_backward(s.dff_b, a.ff_pre, s.dff_a, d.N * d.F);
  } else {
    cpu::zero(s.dff_c, d.N * d.F);
    cpu::swiglu_backward(s.dff_b, s.dff_c, s.dff_a, a.ff_pre, a.ff_up, d.N * d.F);
    cpu::linear_backward(s.dln, up_->grad_data(), nullptr, s.dff_c, a.ln2, up_->data(), N, d.C, d.F);
    poll();
  }
  cpu::linear_backward(s.dln, fc_->grad_data(), grad_or_null(fc_b_), s.dff_b, a.ln2, fc_->data(), N,
                       d.C, d.F);
  poll();
  // dres becomes dL/dx_mid: the residual path plus the norm2 path.
  norm_backward(c_, dres, *ln2_w_, ln2_b_, s.dln, a.x_mid, a.ln2_mean, a.ln2_rstd, N);

  // Attention.
  cpu::zero(s.datt_out, d.N * d.QD);
  cpu::linear_backward(s.datt_out, wo_->grad_data(), grad_or_null(bo_), dres, a.att_out,
                       wo_->data(), N, d.QD, d.C);
  poll();
  cpu::zero(s.dq, d.N * d.QD);
  cpu::zero(s.dk, d.N * d.KD);
  cpu::zero(s.dv, d.N * d.KD);
  cpu::attention_backward(s.dq, s.dk, s.dv, s.datt_out, a.q, a.k, a.v, a.att, B, T, d.NH, d.NKV,
                          d.HS);
  poll();
  float *dq = s.dq, *dq2 = s.dq2, *dk = s.dk, *dk2 = s.dk2;
  if (c_.arch == Arch::llama) {
    cpu::zero(dq2, d.N * d.QD);
    cpu::zero(dk2, d.N * d.KD);
    cpu::rope_backward(dq2, dq, B, T, d.NH, d.HS, 0, c_.rope_theta);
    cpu::rope_backward(dk2, dk, B, T, d.NKV, d.HS, 0, c_.rope_theta);
    std::swap(dq, dq2);
    std::swap(dk, dk2);
  }
  if (c_.qk_norm) {
    cpu::zero(dq2, d.N * d.QD);
    cpu::zero(dk2, d.N * d.KD);
    cpu::rmsnorm_backward(dq2, q_norm_->grad_data(), dq, a.q_pre, q_norm_->data(), a.q_rstd,
                          N * d.NH, d.HS);
    cpu::rmsnorm_backward(dk2, k_norm_->grad_data(), dk, a.k_pre, k_norm_->data(), a.k_rstd,
                          N * d.NKV, d.HS);
    std::swap(dq, dq2);
    std::swap(dk, dk2);
  }
  cpu::zero(s.dln, d.N * d.C);
  cpu::linear_backward(s.dln, wq_->grad_data(), grad_or_null(bq_), dq, a.ln1, wq_->data(), N, d.C,
                       d.QD);
  poll();
  cpu::linear_backward(s.dln, wk_->grad_data(), grad_or_null(bk_), dk, a.ln1, wk_->data(), N, d.C,
                       d.KD);
  poll();
  cpu::linear_backward(s.dln, wv_->grad_data(), grad_or_null(bv_), s.dv, a.ln1, wv_->data(), N,
                       d.C, d.KD);
  poll();
  // dres becomes dL/dx_in.
  norm_backward(c_, dres, *ln1_w_, ln1_b_, s.dln, x_in, a.ln1_mean, a.ln1_rstd, N);
}

}  // namespace ndt
