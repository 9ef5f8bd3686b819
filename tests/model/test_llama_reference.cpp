// The llama features Hugging Face folders bring (interchange/hf_config.h): biases on q, k
// and v (Qwen2), Llama 3's rope scaling and the file's norm eps, checked against a
// forward written here from the papers' formulas in double precision on a tiny model
// (one block, GQA, a position range past the original context), and their gradients
// against finite differences.
#include "../common/gradcheck.h"
#include "tiny_model.h"
#include "model/transformer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace ndt {
namespace {

using Matrix = std::vector<double>;  // row-major

// The model's parameter `name` as doubles.
Matrix weights(const Transformer& model, const std::string& name) {
  const Parameter& p = model.store().get(name);
  return Matrix(p.data(), p.data() + p.numel());
}

// y[n, out] = x[n, in] W[out, in]^T (+ b).
Matrix linear(const Matrix& x, const Matrix& w, const Matrix* b, int n, int in, int out) {
  Matrix y(static_cast<size_t>(n) * out);
  for (int r = 0; r < n; ++r) {
    for (int o = 0; o < out; ++o) {
      double s = b ? (*b)[o] : 0.0;
      for (int i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  }
  return y;
}

Matrix rmsnorm(const Matrix& x, const Matrix& w, int n, int d, double eps) {
  Matrix y(x.size());
  for (int r = 0; r < n; ++r) {
    double ss = 0;
    for (int i = 0; i < d; ++i) ss += x[r * d + i] * x[r * d + i];
    const double scale = 1 / std::sqrt(ss / d + eps);
    for (int i = 0; i < d; ++i) y[r * d + i] = x[r * d + i] * scale * w[i];
  }
  return y;
}

// Llama 3's frequency remapping (transformers' _compute_llama3_parameters).
double frequency(const ModelConfig& c, int i, int D) {
  const double f = std::pow(static_cast<double>(c.rope_theta), -2.0 * i / D);
  if (c.rope_scaling != RopeScaling::llama3) return f;
  const double wavelength = 2 * 3.14159265358979323846 / f, original = c.rope_original_max_seq_len;
  const double low = c.rope_low_freq_factor, high = c.rope_high_freq_factor, factor = c.rope_scaling_factor;
  if (wavelength < original / high) return f;
  if (wavelength > original / low) return f / factor;
  const double s = (original / wavelength - low) / (high - low);
  return (1 - s) * f / factor + s * f;
}

// Rotates each head of x[T, heads, D] by position t ("rotate half").
void rope(Matrix& x, const ModelConfig& c, int T, int heads, int D) {
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < heads; ++h) {
      double* v = &x[(static_cast<size_t>(t) * heads + h) * D];
      for (int i = 0; i < D / 2; ++i) {
        const double a = t * frequency(c, i, D), x1 = v[i], x2 = v[i + D / 2];
        v[i] = x1 * std::cos(a) - x2 * std::sin(a);
        v[i + D / 2] = x2 * std::cos(a) + x1 * std::sin(a);
      }
    }
  }
}

// Causal grouped-query attention of one sequence: out[T, NH * D].
Matrix attention(const Matrix& q, const Matrix& k, const Matrix& v, int T, int NH, int NKV, int D) {
  Matrix out(static_cast<size_t>(T) * NH * D, 0.0);
  for (int h = 0; h < NH; ++h) {
    const int g = h / (NH / NKV);
    for (int t = 0; t < T; ++t) {
      std::vector<double> score(t + 1);
      double top = -1e300, sum = 0;
      for (int s = 0; s <= t; ++s) {
        double dot = 0;
        for (int i = 0; i < D; ++i) dot += q[(t * NH + h) * D + i] * k[(s * NKV + g) * D + i];
        score[s] = dot / std::sqrt(static_cast<double>(D));
        top = std::max(top, score[s]);
      }
      for (double& x : score) sum += (x = std::exp(x - top));
      for (int s = 0; s <= t; ++s) {
        for (int i = 0; i < D; ++i) out[(t * NH + h) * D + i] += score[s] / sum * v[(s * NKV + g) * D + i];
      }
    }
  }
  return out;
}

// The mean cross-entropy of a one-sequence llama forward, in double.
double reference_loss(const Transformer& m, const std::vector<int32_t>& in, const std::vector<int32_t>& target) {
  const ModelConfig& c = m.config();
  const int T = static_cast<int>(in.size()), C = c.d_model, D = c.head_dim(), NH = c.n_head, NKV = c.n_kv_head;
  const int F = c.d_ff, V = c.vocab_size, KD = NKV * D;
  const Matrix wte = weights(m, "wte.weight");
  Matrix x(static_cast<size_t>(T) * C);
  for (int t = 0; t < T; ++t) std::copy_n(&wte[in[t] * C], C, &x[t * C]);
  for (int l = 0; l < c.n_layer; ++l) {
    auto w = [&](const std::string& name) { return weights(m, "blocks." + std::to_string(l) + "." + name); };
    const Matrix h = rmsnorm(x, w("ln1.weight"), T, C, c.norm_eps);
    const Matrix bq = w("attn.wq.bias"), bk = w("attn.wk.bias"), bv = w("attn.wv.bias");
    Matrix q = linear(h, w("attn.wq.weight"), &bq, T, C, NH * D), k = linear(h, w("attn.wk.weight"), &bk, T, C, KD);
    const Matrix v = linear(h, w("attn.wv.weight"), &bv, T, C, KD);
    rope(q, c, T, NH, D);
    rope(k, c, T, NKV, D);
    const Matrix o = linear(attention(q, k, v, T, NH, NKV, D), w("attn.wo.weight"), nullptr, T, NH * D, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    const Matrix h2 = rmsnorm(x, w("ln2.weight"), T, C, c.norm_eps);
    Matrix gate = linear(h2, w("mlp.gate.weight"), nullptr, T, C, F);
    const Matrix up = linear(h2, w("mlp.up.weight"), nullptr, T, C, F);
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
    const Matrix down = linear(gate, w("mlp.down.weight"), nullptr, T, F, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  const Matrix logits = linear(rmsnorm(x, weights(m, "lnf.weight"), T, C, c.norm_eps), weights(m, "lm_head.weight"),
                               nullptr, T, C, V);
  double loss = 0;
  for (int t = 0; t < T; ++t) {
    double top = -1e300, sum = 0;
    for (int v = 0; v < V; ++v) top = std::max(top, logits[t * V + v]);
    for (int v = 0; v < V; ++v) sum += std::exp(logits[t * V + v] - top);
    loss += top + std::log(sum) - logits[t * V + target[t]];
  }
  return loss / T;
}

ModelConfig hf_features() {
  ModelConfig c = testing::tiny(Arch::llama, false);
  c.n_layer = 1;
  c.max_seq_len = 16;
  c.qkv_bias = true;
  c.rope_scaling = RopeScaling::llama3;
  c.rope_theta = 100.0f;  // with an original context of 8, frequencies in all three bands
  c.rope_original_max_seq_len = 8;
  c.rope_scaling_factor = 4.0f;
  c.rope_high_freq_factor = 2.0f;
  c.norm_eps = 0.25f;  // large enough to move the loss well past the tolerance
  return c;
}

// Randomises the biases (they start at zero) so that a forward without them shows.
void perturb_biases(Transformer& model) {
  for (Parameter& p : model.store().params()) {
    if (p.name().ends_with(".bias")) {
      for (int64_t i = 0; i < p.numel(); ++i) p.data()[i] = 0.3f * normal_at(5, hash_name(p.name()), i);
    }
  }
}

// Catches: a q/k/v bias not added (or added after RoPE), rope scaling not applied or
// applied with the wrong bands, the norm eps of the config not used.
TEST(LlamaReference, QkvBiasRopeScalingAndNormEpsMatchADoublePrecisionForward) {
  const ModelConfig c = hf_features();
  c.validate();
  Transformer model(c, 3);
  perturb_biases(model);
  const int T = 12;  // past the original context of 8
  const auto in = testing::tokens(T, c.vocab_size, 1), target = testing::tokens(T, c.vocab_size, 2);
  const double ours = model.evaluate(in.data(), target.data(), 1, T);
  const double reference = reference_loss(model, in, target);
  EXPECT_NEAR(ours, reference, 2e-5 * std::abs(reference));
  // Each feature moves the reference by more than the tolerance, so the check sees it.
  for (auto off : {+[](ModelConfig& x) { x.rope_scaling = RopeScaling::none; },
                   +[](ModelConfig& x) { x.norm_eps = 1e-5f; }}) {
    ModelConfig other = c;
    off(other);
    Transformer changed(other, 3);
    perturb_biases(changed);
    EXPECT_GT(std::abs(reference_loss(changed, in, target) - reference), 1e-4 * std::abs(reference));
  }
}

// Catches: the q/k/v bias gradients missing or wrong under rope scaling.
TEST(LlamaReference, QkvBiasAndScaledRopeGradientsMatchFiniteDifferences) {
  ModelConfig c = hf_features();
  c.n_layer = 2;
  c.norm_eps = 1e-5f;
  Transformer model(c, 42);
  perturb_biases(model);
  const int B = 2, T = 9;
  const auto in = testing::tokens(B * T, c.vocab_size, 1), target = testing::tokens(B * T, c.vocab_size, 2);
  model.store().zero_grads();
  model.forward_backward(in.data(), target.data(), B, T, 1.0f / (B * T));
  auto eval = [&] { return model.evaluate(in.data(), target.data(), B, T); };
  for (Parameter& p : model.store().params()) {
    testing::expect_gradient_matches(eval, p.data(), p.numel(), p.grad_data(), p.name().c_str(),
                                     /*eps=*/1e-3f, /*rtol=*/2e-2, /*atol=*/2e-4, /*max_checks=*/24);
  }
}

}  // namespace
}  // namespace ndt
