// Mixture of experts on one rank (model/moe.h): finite-difference gradients of the
// whole objective (cross-entropy, load-balancing and router z-loss) for every
// parameter, a forced routing whose counts, drops and losses are computed by hand, one
// expert against the dense MLP it replaces, and the invariance of the per-sequence
// losses and capacity drops to how a batch is cut into micro-batches.
#include "../common/gradcheck.h"
#include "tiny_model.h"
#include "core/memory.h"
#include "model/transformer.h"

#include <gtest/gtest.h>

#include <limits>
#include <tuple>
#include <utility>

#include <cmath>
#include <string>
#include <vector>

namespace ndt {
namespace {

using testing::tiny;
using testing::tokens;

ModelConfig tiny_moe(Arch arch) {
  ModelConfig c = tiny(arch, false);
  c.n_experts = 4;
  c.moe_top_k = 2;
  c.moe_d_ff = 12;
  c.moe_aux_loss = 0.1f;  // large enough to weigh in the gradient check
  c.moe_z_loss = 0.01f;
  return c;
}

// The objective backward differentiates, per token: cross-entropy plus the MoE terms.
double objective(Transformer& model, const std::vector<int32_t>& in, const std::vector<int32_t>& target, int B,
                 int T, float grad_scale) {
  model.take_moe_totals();
  const double ce = model.forward_backward(in.data(), target.data(), B, T, grad_scale);
  const MoeTotals totals = model.take_moe_totals();
  return ce + (totals.aux_sum + totals.z_sum) / (B * T);
}

struct Variant {
  const char* name;
  Arch arch;
  MoeScore score;
  bool normalize;
  int shared;       // moe_shared_d_ff
  float capacity;   // moe_capacity_factor
  int every;
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

class MoeGradient : public ::testing::TestWithParam<Variant> {};

// Catches: any term of the router, expert or combine backward wrong (weights' gradient,
// top-k normalisation, the aux loss's per-sequence fractions, the z-loss, the shared MLP).
TEST_P(MoeGradient, EveryParameterMatchesFiniteDifferences) {
  const Variant v = GetParam();
  ModelConfig c = tiny_moe(v.arch);
  c.moe_score = v.score;
  c.moe_normalize_top_k = v.normalize;
  c.moe_shared_d_ff = v.shared;
  c.moe_capacity_factor = v.capacity;
  c.moe_every = v.every;
  const int B = 2, T = 7;
  Transformer model(c, 42, /*loss_chunk_rows=*/5);
  const auto in = tokens(B * T, c.vocab_size, 1), target = tokens(B * T, c.vocab_size, 2);
  model.store().zero_grads();
  const double loss = objective(model, in, target, B, T, 1.0f / (B * T));
  EXPECT_GT(loss, 1.0);
  std::vector<float> analytic(model.store().grads().data<float>(),
                              model.store().grads().data<float>() + model.store().numel());
  auto eval = [&] { return objective(model, in, target, B, T, 0.0f); };
  for (Parameter& p : model.store().params()) {
    testing::expect_gradient_matches(eval, p.data(), p.numel(), analytic.data() + p.arena_offset, p.name().c_str(),
                                     /*eps=*/1e-3f, /*rtol=*/2e-2, /*atol=*/2e-4, /*max_checks=*/16);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Routers, MoeGradient,
    ::testing::Values(Variant{"gpt2_softmax", Arch::gpt2, MoeScore::softmax, true, 0, 0.0f, 1},
                      Variant{"llama_softmax_unnormalised", Arch::llama, MoeScore::softmax, false, 0, 0.0f, 1},
                      Variant{"llama_sigmoid_shared", Arch::llama, MoeScore::sigmoid, true, 8, 0.0f, 1},
                      Variant{"gpt2_sigmoid_shared_every2", Arch::gpt2, MoeScore::sigmoid, true, 16, 0.0f, 2},
                      Variant{"llama_capacity", Arch::llama, MoeScore::softmax, true, 0, 1.0f, 1}),
    [](const auto& info) { return std::string(info.param.name); });

// A context run by hand, to read what the MoE block kept.
struct Routed {
  MoeTotals totals;
  MoeActivations block0;
};

Routed run_once(Transformer& model, int B, int T) {
  const auto in = tokens(B * T, model.config().vocab_size, 3), target = tokens(B * T, model.config().vocab_size, 4);
  MicroBatchContext ctx;
  model.store().zero_grads();
  model.take_moe_totals();
  model.prepare(ctx, in.data(), target.data(), B, T, 1.0f / (B * T), /*forward_only=*/false);
  for (int u = 0; u < model.num_units(); ++u) model.unit(u).forward(ctx);
  MoeActivations block0 = ctx.moe[0];  // freed by the block's backward
  for (int u = model.num_units() - 1; u >= 0; --u) model.unit(u).backward(ctx, nullptr);
  return {model.take_moe_totals(), block0};
}

// Catches: ties broken otherwise than towards the lower expert, capacity admitting in
// another order or per batch instead of per sequence, the aux loss or z-loss formula.
TEST(MoeRouting, AZeroRouterGivesTheHandComputedCountsDropsAndLosses) {
  for (int k : {1, 2}) {
    ModelConfig c = tiny_moe(Arch::llama);
    c.n_layer = 1;
    c.moe_top_k = k;
    c.moe_capacity_factor = 1.0f;
    c.moe_aux_loss = 0.01f;
    c.moe_z_loss = 0.001f;
    Transformer model(c, 5);
    const Parameter& router = model.store().get("blocks.0.moe.router.weight");
    std::fill(router.data(), router.data() + router.numel(), 0.0f);  // every score 1 / E: ties everywhere
    const int B = 3, T = 8, E = c.n_experts;
    const Routed r = run_once(model, B, T);
    // Each token chooses experts 0 .. k-1; capacity ceil(1.0 x 8 x k / 4) = 2k per sequence.
    const int capacity = 2 * k;
    std::vector<int64_t> expected(static_cast<size_t>(E), 0);
    for (int e = 0; e < k; ++e) expected[static_cast<size_t>(e)] = int64_t{B} * capacity;
    EXPECT_EQ(r.totals.stats.tokens_per_expert, expected) << "k = " << k;
    EXPECT_EQ(r.totals.stats.assignments, int64_t{B} * T * k);
    EXPECT_EQ(r.totals.stats.dropped, int64_t{B} * (T - capacity) * k);
    // The first 2k tokens of every sequence are the kept ones.
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        for (int j = 0; j < k; ++j) {
          EXPECT_EQ(r.block0.row[static_cast<size_t>((b * T + t) * k + j)] >= 0, t < capacity)
              << "k " << k << " sequence " << b << " token " << t << " slot " << j;
        }
      }
    }
    // f = 1 / k for each chosen expert, P = 1 / E: aux_s = E x k x (1/k x 1/E) = 1 per
    // sequence; lse = log E per token.
    EXPECT_NEAR(r.totals.aux_sum / (B * T), 0.01 * 1.0, 1e-7);
    EXPECT_NEAR(r.totals.z_sum / (B * T), 0.001 * std::log(4.0) * std::log(4.0), 1e-7);
  }
}

// Catches: capacity rounded down where factor x T x k / E is not whole (a ceil turned
// floor, which whole numbers cannot show), and a factor large enough to mean "never drop"
// overflowing an integer and dropping every token (the MoE blocks training as identity).
TEST(MoeRouting, CapacityRoundsUpAndAHugeFactorDropsNothing) {
  ModelConfig c = tiny_moe(Arch::llama);
  c.n_layer = 1;
  // Not whole: 0.9 x 8 x k / 4 = 1.8 k.
  for (auto [factor, k, expected] : {std::tuple{0.9f, 1, 2}, {0.9f, 2, 4}, {0.3f, 1, 1}, {1e30f, 2, 8},
                                     {std::numeric_limits<float>::max(), 1, 8}, {0.0f, 2, 8}}) {
    c.moe_capacity_factor = factor;
    c.moe_top_k = k;
    EXPECT_EQ(moe_expert_capacity(c, 8), expected) << "factor " << factor << ", k " << k;
  }
  for (auto [factor, k] : {std::pair{0.9f, 1}, {0.9f, 2}, {1e30f, 2}}) {
    c.moe_capacity_factor = factor;
    c.moe_top_k = k;
    Transformer model(c, 5);
    const Parameter& router = model.store().get("blocks.0.moe.router.weight");
    std::fill(router.data(), router.data() + router.numel(), 0.0f);  // every token chooses experts 0 .. k-1
    const int B = 3, T = 8;
    const Routed r = run_once(model, B, T);
    const int64_t capacity = factor > 1 ? T : static_cast<int64_t>(std::ceil(0.9 * T * k / c.n_experts));
    std::vector<int64_t> kept(static_cast<size_t>(c.n_experts), 0);
    for (int e = 0; e < k; ++e) kept[static_cast<size_t>(e)] = B * capacity;
    EXPECT_EQ(r.totals.stats.tokens_per_expert, kept) << "factor " << factor << ", k " << k;
    EXPECT_EQ(r.totals.stats.dropped, int64_t{B} * (T - capacity) * k) << "factor " << factor << ", k " << k;
  }
}

// Catches: grouping or ungrouping rows wrongly, the combine weight, the expert GEMMs'
// strides: with one expert chosen with weight 1 the MoE block is the dense block.
TEST(MoeRouting, OneExpertIsTheDenseMlp) {
  ModelConfig dense = tiny(Arch::llama, false);
  ModelConfig moe = dense;
  moe.n_experts = 1;
  moe.moe_top_k = 1;
  moe.moe_aux_loss = 0;
  Transformer a(dense, 9), b(moe, 9);
  for (Parameter& p : b.store().params()) {
    std::string name = p.name();
    for (const char* m : {"gate", "up", "down"}) {
      const std::string routed = std::string("moe.experts.") + m;
      if (const size_t at = name.find(routed); at != std::string::npos) name.replace(at, routed.size(), std::string("mlp.") + m);
    }
    if (name.find("router") != std::string::npos) continue;
    const Parameter& src = a.store().get(name);
    ASSERT_EQ(src.numel(), p.numel()) << name;
    std::copy(src.data(), src.data() + src.numel(), p.data());
  }
  const int B = 2, T = 6;
  const auto in = tokens(B * T, dense.vocab_size, 7), target = tokens(B * T, dense.vocab_size, 8);
  a.store().zero_grads();
  b.store().zero_grads();
  const double la = a.forward_backward(in.data(), target.data(), B, T, 1.0f / (B * T));
  const double lb = b.forward_backward(in.data(), target.data(), B, T, 1.0f / (B * T));
  EXPECT_NEAR(la, lb, 1e-6 * la);
  const Parameter& wd = a.store().get("blocks.1.mlp.down.weight");
  const Parameter& we = b.store().get("blocks.1.moe.experts.down.weight");
  for (int64_t i = 0; i < wd.numel(); ++i) {
    ASSERT_NEAR(we.grad_data()[i], wd.grad_data()[i], 1e-5 * std::fabs(wd.grad_data()[i]) + 1e-7) << i;
  }
}

// Catches: losses or drops computed over a micro-batch instead of per sequence (the
// property that makes every layout give the same run).
TEST(MoeRouting, MicroBatchSplitsGiveTheSameGradientsAndDrops) {
  ModelConfig c = tiny_moe(Arch::gpt2);
  c.moe_capacity_factor = 0.75f;
  const int B = 4, T = 8;
  const auto in = tokens(B * T, c.vocab_size, 11), target = tokens(B * T, c.vocab_size, 12);
  Transformer whole(c, 3), parts(c, 3);
  whole.store().zero_grads();
  parts.store().zero_grads();
  const double l_whole = whole.forward_backward(in.data(), target.data(), B, T, 1.0f / (B * T));
  const MoeTotals t_whole = whole.take_moe_totals();
  double l_parts = 0;
  for (int b = 0; b < B; ++b) {
    l_parts += parts.forward_backward(in.data() + b * T, target.data() + b * T, 1, T, 1.0f / (B * T)) / B;
  }
  const MoeTotals t_parts = parts.take_moe_totals();
  EXPECT_NEAR(l_whole, l_parts, 1e-6 * l_whole);
  EXPECT_NEAR(t_whole.aux_sum, t_parts.aux_sum, 1e-6 * t_whole.aux_sum);
  EXPECT_EQ(t_whole.stats.tokens_per_expert, t_parts.stats.tokens_per_expert);
  EXPECT_GT(t_whole.stats.dropped, 0);
  EXPECT_EQ(t_whole.stats.dropped, t_parts.stats.dropped);
  // The whole gradient vector (per element, sums of rounding-level terms in another order
  // differ relatively more).
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < whole.store().numel(); ++i) {
    const double g = whole.store().grads().data<float>()[i], h = parts.store().grads().data<float>()[i];
    diff += (g - h) * (g - h), norm += g * g;
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-6);
}

// Catches: MoE activations the prediction leaves out, kept under full recompute, or
// sized for the wrong rows, in fp32 and bf16 (where the experts keep fp32 rows and the
// dense parts pack theirs); expert weights without a compute copy.
TEST(MoeMemory, KeptActivationsEqualThePrediction) {
  MemoryLedger& ledger = MemoryLedger::instance();
  for (const auto& [mode, compute] : {std::pair{CheckpointMode::none, DType::f32}, {CheckpointMode::full, DType::f32},
                                      {CheckpointMode::none, DType::bf16}, {CheckpointMode::full, DType::bf16}}) {
    for (Arch arch : {Arch::gpt2, Arch::llama}) {
      const size_t before = ledger.current(MemTag::activations), params = ledger.current(MemTag::params);
      ModelConfig c = tiny_moe(arch);
      c.moe_shared_d_ff = 8;
      const int B = 3, T = 8, chunk = 4;
      {
        Transformer model(c, 1, chunk);
        model.set_precision({compute, false, {}});
        model.set_activation_checkpointing({mode, 1});
        // Master values and, in bf16, every one's compute copy (the experts' too).
        EXPECT_EQ(ledger.current(MemTag::params) - params,
                  static_cast<size_t>((compute == DType::f32 ? 4 : 6) * model.store().numel()));
        const auto in = tokens(B * T, c.vocab_size, 8);
        model.store().zero_grads();
        MicroBatchContext ctx;
        model.prepare(ctx, in.data(), in.data(), B, T, 1.0f, /*forward_only=*/false);
        for (int u = 0; u < model.num_units(); ++u) model.unit(u).forward(ctx);
        // Between forward and backward: the context, the workspace and the experts' rows.
        EXPECT_EQ(ledger.current(MemTag::activations) - before,
                  static_cast<size_t>(Transformer::predict_activation_bytes(c, B, T, chunk, {}, {mode, 1}, {}, compute)))
            << arch_name(arch) << " " << checkpoint_mode_name(mode) << " " << dtype_name(compute);
        for (int u = model.num_units() - 1; u >= 0; --u) model.unit(u).backward(ctx, nullptr);
        int64_t kept = 0;
        for (const MoeActivations& a : ctx.moe) kept += a.logits.defined() || a.inputs.defined();
        EXPECT_EQ(kept, 0) << "an MoE block's rows outlive its backward";
      }
      EXPECT_EQ(ledger.current(MemTag::activations), before);
    }
  }
}

}  // namespace
}  // namespace ndt
