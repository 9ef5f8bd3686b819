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

// Row counts and this rank's widths: N all rows, Nl local rows (N / tp under sequence
// parallel); F, QD, KD, NH, NKV divided by tp.
struct Dims {
  int64_t N, Nl, C, F, QD, KD, NH, NKV, HS;
  Dims(const ModelConfig& c, const TpLayout& tp, int B, int T)
      : N(int64_t{B} * T), Nl(tp.local_rows(N)), C(c.d_model), F(c.d_ff / tp.size),
        QD(int64_t{c.d_model} / tp.size), KD(int64_t{c.kv_heads()} / tp.size * c.head_dim()),
        NH(c.n_head / tp.size), NKV(c.kv_heads() / tp.size), HS(c.head_dim()) {}
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

// The activations of the local rows (split by sequence parallel), first.
void carve_local_row_acts(const ModelConfig& c, const Dims& d, BlockActivations& a, Carver& m) {
  if (c.arch == Arch::gpt2) a.ln1_mean = m.take(d.Nl);
  a.ln1_rstd = m.take(d.Nl);
  a.x_mid = m.take(d.Nl * d.C);
  if (c.arch == Arch::gpt2) a.ln2_mean = m.take(d.Nl);
  a.ln2_rstd = m.take(d.Nl);
}

BlockActivations carve_acts(const ModelConfig& c, const TpLayout& tp, int B, int T, Carver& m) {
  Dims d(c, tp, B, T);
  BlockActivations a;
  carve_local_row_acts(c, d, a, m);
  a.ln1 = m.take(d.N * d.C);
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
  a.ln2 = m.take(d.N * d.C);
  a.ff_pre = m.take(d.N * d.F);
  if (c.arch == Arch::llama) a.ff_up = m.take(d.N * d.F);
  a.ff_act = m.take(d.N * d.F);
  return a;
}

BlockScratch carve_scratch(const ModelConfig& c, const TpLayout& tp, int B, int T, Carver& m) {
  Dims d(c, tp, B, T);
  BlockScratch s;
  s.dln = m.take(d.N * d.C);
  if (tp.splits_rows()) {
    s.dln_local = m.take(d.Nl * d.C);
    s.dout_full = m.take(d.N * d.C);
  }
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

const float* data_or_null(const Parameter* p) { return p ? p->data() : nullptr; }

}  // namespace

int64_t block_activation_floats(const ModelConfig& c, const TpLayout& tp, int B, int T) {
  Carver m(nullptr);
  carve_acts(c, tp, B, T, m);
  return m.used();
}

int64_t block_local_row_floats(const ModelConfig& c, const TpLayout& tp, int B, int T) {
  Carver m(nullptr);
  BlockActivations a;
  carve_local_row_acts(c, Dims(c, tp, B, T), a, m);
  return m.used();
}

int64_t block_scratch_floats(const ModelConfig& c, const TpLayout& tp, int B, int T) {
  Carver m(nullptr);
  carve_scratch(c, tp, B, T, m);
  return m.used();
}

BlockActivations carve_block_activations(const ModelConfig& c, const TpLayout& tp, int B, int T, float* base) {
  Carver m(base);
  return carve_acts(c, tp, B, T, m);
}

BlockScratch carve_block_scratch(const ModelConfig& c, const TpLayout& tp, int B, int T, float* base) {
  Carver m(base);
  return carve_scratch(c, tp, B, T, m);
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
  // Tensor parallel: a column-parallel layer splits its output features (weight and
  // bias dim 0), a row-parallel one its input features (weight dim 1; bias replicated).
  enum class Split { column, row };
  auto linear = [&](const std::string& name, int64_t out, int64_t in, float init_std, Split split) {
    specs.push_back({p + name + ".weight", {out, in}, InitKind::normal, init_std, true, split == Split::column ? 0 : 1});
    if (bias) specs.push_back({p + name + ".bias", {out}, InitKind::zeros, 0, false, split == Split::column ? 0 : -1});
  };
  norm("ln1");
  linear("attn.wq", QD, C, std, Split::column);
  linear("attn.wk", KD, C, std, Split::column);
  linear("attn.wv", KD, C, std, Split::column);
  if (c.qk_norm) {  // one weight shared by all heads: replicated, used on each rank's heads
    specs.push_back({p + "attn.q_norm.weight", {c.head_dim()}, InitKind::ones, 0, false, -1, true});
    specs.push_back({p + "attn.k_norm.weight", {c.head_dim()}, InitKind::ones, 0, false, -1, true});
  }
  linear("attn.wo", C, QD, residual_std, Split::row);
  norm("ln2");
  if (c.arch == Arch::gpt2) {
    linear("mlp.fc", F, C, std, Split::column);
    linear("mlp.proj", C, F, residual_std, Split::row);
  } else {
    linear("mlp.gate", F, C, std, Split::column);
    linear("mlp.up", F, C, std, Split::column);
    linear("mlp.down", C, F, residual_std, Split::row);
  }
  return specs;
}

void norm_forward(const ModelConfig& c, float* out, float* mean, float* rstd, const float* inp,
                  const Parameter& weight, const Parameter* bias, int64_t N) {
  if (c.arch == Arch::gpt2) {
    cpu::layernorm_forward(out, mean, rstd, inp, weight.data(), data_or_null(bias), static_cast<int>(N), c.d_model,
                           c.norm_eps);
  } else {
    cpu::rmsnorm_forward(out, rstd, inp, weight.data(), static_cast<int>(N), c.d_model, c.norm_eps);
  }
}

void norm_backward(const ModelConfig& c, float* dinp, float* dweight, float* dbias, const Parameter& weight,
                   const float* dout, const float* inp, const float* mean, const float* rstd, int64_t N) {
  if (c.arch == Arch::gpt2) {
    cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight.data(), mean, rstd, static_cast<int>(N),
                            c.d_model);
  } else {
    cpu::rmsnorm_backward(dinp, dweight, dout, inp, weight.data(), rstd, static_cast<int>(N), c.d_model);
  }
}

Block::Block(const ModelConfig& config, int layer, ParameterStore& store, const TensorParallel& tp)
    : c_(config), tp_(tp), prefix_("blocks." + std::to_string(layer) + ".") {
  const bool bias = c_.has_bias();
  const bool gpt2 = c_.arch == Arch::gpt2;
  ln1_w_ = find(store, "ln1.weight");
  ln1_b_ = find(store, "ln1.bias", bias);
  ln2_w_ = find(store, "ln2.weight");
  ln2_b_ = find(store, "ln2.bias", bias);
  wq_ = {find(store, "attn.wq.weight"), find(store, "attn.wq.bias", bias)};
  wk_ = {find(store, "attn.wk.weight"), find(store, "attn.wk.bias", bias)};
  wv_ = {find(store, "attn.wv.weight"), find(store, "attn.wv.bias", bias)};
  wo_ = {find(store, "attn.wo.weight"), find(store, "attn.wo.bias", bias), tp};
  q_norm_ = find(store, "attn.q_norm.weight", c_.qk_norm);
  k_norm_ = find(store, "attn.k_norm.weight", c_.qk_norm);
  fc_ = {find(store, gpt2 ? "mlp.fc.weight" : "mlp.gate.weight"), find(store, "mlp.fc.bias", bias)};
  up_ = {find(store, "mlp.up.weight", !gpt2), nullptr};
  proj_ = {find(store, gpt2 ? "mlp.proj.weight" : "mlp.down.weight"), find(store, "mlp.proj.bias", bias), tp};
  partial_ = PartialGradients(tp, {ln1_w_, ln1_b_, ln2_w_, ln2_b_, wo_.bias, proj_.bias, q_norm_, k_norm_});
}

const Parameter* Block::find(ParameterStore& store, const std::string& suffix, bool required) {
  if (!required) return nullptr;
  return &store.get(prefix_ + suffix);
}

void Block::forward(const float* x_in, float* x_out, BlockActivations& a, BlockScratch& s, int B, int T) const {
  const Dims d(c_, tp_.layout(), B, T);
  // Attention: norm on the local rows, then the region (this rank's heads) on all rows.
  // Under sequence parallel the norm writes a scratch that is all-gathered into ln1.
  float* ln1_local = tp_.splits_rows() ? s.dln_local : a.ln1;
  norm_forward(c_, ln1_local, a.ln1_mean, a.ln1_rstd, x_in, *ln1_w_, ln1_b_, d.Nl);
  column_parallel_input_forward(tp_, ln1_local, a.ln1, d.Nl, d.C);

  float* q_dst = c_.qk_norm ? a.q_pre : a.q;
  float* k_dst = c_.qk_norm ? a.k_pre : a.k;
  wq_.forward(q_dst, a.ln1, d.N);
  wk_.forward(k_dst, a.ln1, d.N);
  wv_.forward(a.v, a.ln1, d.N);
  const int N = static_cast<int>(d.N);
  if (c_.qk_norm) {
    cpu::rmsnorm_forward(a.q, a.q_rstd, a.q_pre, q_norm_->data(), N * d.NH, d.HS, c_.norm_eps);
    cpu::rmsnorm_forward(a.k, a.k_rstd, a.k_pre, k_norm_->data(), N * d.NKV, d.HS, c_.norm_eps);
  }
  if (c_.arch == Arch::llama) {
    cpu::rope_forward(a.q, a.q, B, T, d.NH, d.HS, 0, c_.rope_theta);
    cpu::rope_forward(a.k, a.k, B, T, d.NKV, d.HS, 0, c_.rope_theta);
  }
  cpu::attention_forward(a.att_out, a.lse, a.att, a.q, a.k, a.v, B, T, d.NH, d.NKV, d.HS);
  wo_.forward(a.x_mid, tp_.splits_rows() ? s.dln : a.x_mid, a.att_out, d.N);
  cpu::add_inplace(a.x_mid, x_in, d.Nl * d.C);

  // MLP, the same way.
  float* ln2_local = tp_.splits_rows() ? s.dln_local : a.ln2;
  norm_forward(c_, ln2_local, a.ln2_mean, a.ln2_rstd, a.x_mid, *ln2_w_, ln2_b_, d.Nl);
  column_parallel_input_forward(tp_, ln2_local, a.ln2, d.Nl, d.C);
  fc_.forward(a.ff_pre, a.ln2, d.N);
  if (c_.arch == Arch::gpt2) {
    cpu::gelu_forward(a.ff_act, a.ff_pre, d.N * d.F);
  } else {
    up_.forward(a.ff_up, a.ln2, d.N);
    cpu::swiglu_forward(a.ff_act, a.ff_pre, a.ff_up, d.N * d.F);
  }
  proj_.forward(x_out, tp_.splits_rows() ? s.dln : x_out, a.ff_act, d.N);
  cpu::add_inplace(x_out, a.x_mid, d.Nl * d.C);
}

void Block::backward(float* dres, const float* x_in, const BlockActivations& a, BlockScratch& s,
                     int B, int T, ModelHooks* hooks) {
  const Dims d(c_, tp_.layout(), B, T);
  const int N = static_cast<int>(d.N);
  auto poll = [hooks] {
    if (hooks) hooks->poll();
  };
  partial_.begin();

  // MLP: dres is dL/dx_out, which is also dL/d(mlp output).
  cpu::zero(s.dff_a, d.N * d.F);
  proj_.backward(s.dff_a, s.dout_full, dres, a.ff_act, d.N, partial_.grad(proj_.bias));
  poll();
  cpu::zero(s.dff_b, d.N * d.F);
  cpu::zero(s.dln, d.N * d.C);
  if (c_.arch == Arch::gpt2) {
    cpu::gelu_backward(s.dff_b, a.ff_pre, s.dff_a, d.N * d.F);
  } else {
    cpu::zero(s.dff_c, d.N * d.F);
    cpu::swiglu_backward(s.dff_b, s.dff_c, s.dff_a, a.ff_pre, a.ff_up, d.N * d.F);
    up_.backward(s.dln, s.dff_c, a.ln2, d.N);
    poll();
  }
  fc_.backward(s.dln, s.dff_b, a.ln2, d.N);
  poll();
  // dres becomes dL/dx_mid: the residual path plus the norm2 path.
  const float* dln2 = column_parallel_input_backward(tp_, s.dln, s.dln_local, d.Nl, d.C);
  norm_backward(c_, dres, partial_.grad(ln2_w_), partial_.grad(ln2_b_), *ln2_w_, dln2, a.x_mid, a.ln2_mean,
                a.ln2_rstd, d.Nl);

  // Attention.
  cpu::zero(s.datt_out, d.N * d.QD);
  wo_.backward(s.datt_out, s.dout_full, dres, a.att_out, d.N, partial_.grad(wo_.bias));
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
    cpu::rmsnorm_backward(dq2, partial_.grad(q_norm_), dq, a.q_pre, q_norm_->data(), a.q_rstd, N * d.NH, d.HS);
    cpu::rmsnorm_backward(dk2, partial_.grad(k_norm_), dk, a.k_pre, k_norm_->data(), a.k_rstd, N * d.NKV, d.HS);
    std::swap(dq, dq2);
    std::swap(dk, dk2);
  }
  cpu::zero(s.dln, d.N * d.C);
  wq_.backward(s.dln, dq, a.ln1, d.N);
  poll();
  wk_.backward(s.dln, dk, a.ln1, d.N);
  poll();
  wv_.backward(s.dln, s.dv, a.ln1, d.N);
  poll();
  // dres becomes dL/dx_in.
  const float* dln1 = column_parallel_input_backward(tp_, s.dln, s.dln_local, d.Nl, d.C);
  norm_backward(c_, dres, partial_.grad(ln1_w_), partial_.grad(ln1_b_), *ln1_w_, dln1, x_in, a.ln1_mean,
                a.ln1_rstd, d.Nl);
  partial_.finish();
}

}  // namespace ndt
