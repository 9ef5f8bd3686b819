// LoRA (model/lora.h, model/lora_config.h): the adapters' gradients against finite
// differences on column-parallel (wq, wk, wv, mlp.fc / gate / up) and row-parallel (wo,
// mlp.proj / down) bases, frozen parameters' gradients never written, the start equal
// to the base model, and every bad setting refused by name.
#include "../common/errors.h"
#include "../common/gradcheck.h"
#include "core/memory.h"
#include "core/text_list.h"
#include "model/lora.h"
#include "model/transformer.h"
#include "tiny_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace ndt {
namespace {

using testing::tiny;
using testing::tokens;

ModelConfig with_lora(ModelConfig c, std::vector<std::string> targets) {
  c.lora.targets = std::move(targets);
  c.lora.rank = 3;
  c.lora.alpha = 5.0f;
  return c;
}

bool is_b(const Parameter& p) { return p.name().size() > 7 && p.name().substr(p.name().size() - 7) == ".lora_b"; }

// B starts at zero, which would leave A's gradient zero: give it values.
void randomize_b(Transformer& model) {
  uint64_t stream = 100;
  for (Parameter& p : model.store().params()) {
    if (is_b(p)) fill_normal(p.data(), p.numel(), 0, 0.0f, 0.3f, 7, stream++);
  }
}

class LoraGradient : public ::testing::TestWithParam<Arch> {};

constexpr float kSentinel = 3.0f;  // a gradient of 1e-6 or more added to it changes it

// Catches: a wrong adapter forward or backward on either kind of base (scale, transpose,
// a missing input-gradient term: the adapters before it would then be off), and any
// layer that writes a frozen parameter's gradient (norms, biases, QK-norm, embeddings,
// the output layer, the base weights): their gradients hold a sentinel before the pass
// and must still hold it after, while the input gradient flows through them to the
// adapters below. (Not NaN: the layers add into gradients, and NaN + g is NaN.)
TEST_P(LoraGradient, AdaptersMatchFiniteDifferencesAndFrozenGradientsAreNeverWritten) {
  const ModelConfig c = with_lora(tiny(GetParam(), /*qk_norm=*/true), {"*"});
  const int B = 2, T = 7;
  Transformer model(c, 42, /*loss_chunk_rows=*/5);
  randomize_b(model);
  model.store().zero_grads();
  int frozen = 0, adapters = 0;
  for (Parameter& p : model.store().params()) {
    if (!p.trainable() && p.grad.defined()) std::fill(p.grad_data(), p.grad_data() + p.numel(), kSentinel);
  }
  const auto in = tokens(B * T, c.vocab_size, 1), target = tokens(B * T, c.vocab_size, 2);
  model.forward_backward(in.data(), target.data(), B, T, 1.0f / (B * T));
  auto eval = [&] { return model.evaluate(in.data(), target.data(), B, T); };
  for (Parameter& p : model.store().params()) {
    if (!p.trainable()) {
      ++frozen;
      for (int64_t i = 0; p.grad.defined() && i < p.numel(); ++i) {
        ASSERT_EQ(p.grad_data()[i], kSentinel) << p.name() << " gradient written at " << i;
      }
      continue;
    }
    ASSERT_TRUE(is_lora_parameter(p.name())) << p.name() << " is trainable under LoRA";
    ++adapters;
    testing::expect_gradient_matches(eval, p.data(), p.numel(), p.grad_data(), p.name().c_str(),
                                     /*eps=*/1e-3f, /*rtol=*/2e-2, /*atol=*/2e-4, /*max_checks=*/24);
  }
  // Every linear of both blocks: 2 factors each (gpt2: 6 linears, llama: 7).
  EXPECT_EQ(adapters, 2 * c.n_layer * (GetParam() == Arch::gpt2 ? 6 : 7));
  EXPECT_GT(frozen, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, LoraGradient, ::testing::Values(Arch::gpt2, Arch::llama),
                         [](const auto& info) { return std::string(arch_name(info.param)); });

// Catches: a zero-bubble split that loses or doubles the adapters' gradients (their
// whole backward runs in the input half, before the block's partial sums are reduced),
// writes a frozen weight's gradient in the deferred weight half, or keeps an output
// gradient for a weight half that has nothing to compute.
TEST(Lora, SplitBackwardIsBitwiseTheFusedBackward) {
  for (Arch arch : {Arch::gpt2, Arch::llama}) {
    const ModelConfig c = with_lora(tiny(arch, /*qk_norm=*/arch == Arch::llama), {"*"});
    const int B = 2, T = 7;
    const auto in = tokens(B * T, c.vocab_size, 31), target = tokens(B * T, c.vocab_size, 32);
    Transformer fused(c, 3, 5), split(c, 3, 5);
    for (Transformer* m : {&fused, &split}) {
      randomize_b(*m);
      m->store().zero_grads();
    }
    fused.forward_backward(in.data(), target.data(), B, T, 0.5f);
    MicroBatchContext a;
    split.prepare(a, in.data(), target.data(), B, T, 0.5f, false);
    const int units = split.num_units();
    for (int u = 0; u < units; ++u) split.unit(u).forward(a);
    const size_t before = MemoryLedger::instance().current(MemTag::activations);
    for (int u = units - 1; u >= 0; --u) split.unit(u).backward_input(a, nullptr);
    // The bases are frozen: no output gradient is kept for a weight half.
    EXPECT_EQ(MemoryLedger::instance().current(MemTag::activations), before) << arch_name(arch);
    for (int u = units - 1; u >= 0; --u) split.unit(u).backward_weight(a, nullptr);
    const float* f = fused.store().grads().data<float>();
    const float* s = split.store().grads().data<float>();
    EXPECT_EQ(std::vector<float>(f, f + fused.store().grad_numel()),
              std::vector<float>(s, s + split.store().grad_numel()))
        << arch_name(arch);
    for (const Parameter& p : split.store().params()) {
      if (!p.trainable()) {
        EXPECT_FALSE(p.grad.defined()) << p.name() << ": a frozen parameter has no gradient";
      }
    }
  }
}

// Catches: an adapter that changes the model before training (B must start at zero),
// or base weights initialised differently with adapters present.
TEST(Lora, StartsAsTheBaseModel) {
  for (Arch arch : {Arch::gpt2, Arch::llama}) {
    const ModelConfig base = tiny(arch, false);
    Transformer plain(base, 42, 5), adapted(with_lora(base, {"wq", "wv", "mlp.*"}), 42, 5);
    const auto in = tokens(14, base.vocab_size, 1), target = tokens(14, base.vocab_size, 2);
    EXPECT_EQ(plain.evaluate(in.data(), target.data(), 2, 7), adapted.evaluate(in.data(), target.data(), 2, 7))
        << arch_name(arch);
  }
}

// Catches: targets matched on the wrong part of a name, adapters with the wrong shapes
// or tensor-parallel declarations (the factor split with the base, the other used in
// the region), a base left trainable.
TEST(Lora, AdaptsTheNamedLinearsWithTheirShapesAndSplits) {
  const ModelConfig c = with_lora(tiny(Arch::llama, false), {"wq", "attn.wo", "mlp.g*"});
  std::vector<std::string> adapters;
  for (const ParameterSpec& s : model_parameter_specs(c)) {
    EXPECT_EQ(s.frozen, !is_lora_parameter(s.name)) << s.name;
    if (s.name.rfind("blocks.0.", 0) == 0 && is_lora_parameter(s.name)) adapters.push_back(s.name);
  }
  EXPECT_EQ(adapters, (std::vector<std::string>{"blocks.0.attn.wq.lora_a", "blocks.0.attn.wq.lora_b",
                                                "blocks.0.attn.wo.lora_a", "blocks.0.attn.wo.lora_b",
                                                "blocks.0.mlp.gate.lora_a", "blocks.0.mlp.gate.lora_b"}));
  auto spec = [&](const std::string& name) {
    for (const ParameterSpec& s : model_parameter_specs(c)) {
      if (s.name == name) return s;
    }
    ADD_FAILURE() << name;
    return ParameterSpec{};
  };
  const ParameterSpec qa = spec("blocks.0.attn.wq.lora_a"), qb = spec("blocks.0.attn.wq.lora_b");
  const ParameterSpec oa = spec("blocks.0.attn.wo.lora_a"), ob = spec("blocks.0.attn.wo.lora_b");
  EXPECT_EQ(qa.logical_shape, (Shape{3, 16}));
  EXPECT_EQ(qb.logical_shape, (Shape{16, 3}));
  EXPECT_EQ(qb.init, InitKind::zeros);
  EXPECT_FLOAT_EQ(qa.init_std, 1.0f / 3.0f);
  // Column base: B split with W's rows, A replicated inside the region; row base: A
  // split with W's columns, B replicated inside the region.
  EXPECT_EQ(qa.tp_dim, -1);
  EXPECT_TRUE(qa.tp_region);
  EXPECT_EQ(qb.tp_dim, 0);
  EXPECT_EQ(oa.tp_dim, 1);
  EXPECT_EQ(ob.tp_dim, -1);
  EXPECT_TRUE(ob.tp_region);
  EXPECT_EQ(count_trainable_parameters(c), 2 * (3 * 16 + 16 * 3 + 3 * 16 + 16 * 3 + 3 * 16 + 24 * 3));
}

TEST(LoraErrors, BadSettingsAreRefusedByName) {
  auto refused = [](ModelConfig c, const std::vector<std::string>& parts) {
    testing::expect_error([&] { c.validate(); }, parts);
  };
  const ModelConfig gpt2 = with_lora(tiny(Arch::gpt2, false), {"wq"});
  ModelConfig c = gpt2;
  c.lora.targets = {"wq", "q_proj"};
  refused(c, {"lora.targets", "\"q_proj\"", "matches no linear layer", "attn.wq"});
  c = gpt2, c.lora.rank = 0;
  refused(c, {"lora.rank = 0", "must be positive"});
  c = gpt2, c.lora.rank = -2;
  refused(c, {"lora.rank = -2"});
  c = gpt2, c.lora.rank = 17;  // d_model 16
  refused(c, {"lora.rank = 17", "attn.wq", "min(in, out) = 16"});
  c = gpt2, c.lora.alpha = 0;
  refused(c, {"lora.alpha = 0", "must be positive"});
  c = gpt2, c.lora.dropout = 0.1f;
  refused(c, {"lora.dropout = 0.1", "not built"});
  c = gpt2, c.n_experts = 4, c.moe_d_ff = 32, c.lora.targets = {"fc"};
  refused(c, {"lora.targets", "\"fc\"", "moe.experts", "moe.experts.fc"});
  c.lora.targets = {"mlp.*"};  // the dense layers only: no MoE block has them here
  refused(c, {"\"mlp.*\"", "matches no linear layer"});
  c.lora.targets = {"wq", "wo"};
  EXPECT_NO_THROW(c.validate());
}

TEST(LoraErrors, TargetsThatAreNotAListAreRefusedByName) {
  testing::expect_error([] { parse_lora_targets("\"wq\""); }, {"lora.targets = \"wq\"", "not a list"});
  testing::expect_error([] { parse_lora_targets("[1, 2]"); }, {"lora.targets", "non-empty string"});
  EXPECT_EQ(parse_lora_targets(string_list_text({"wq", "mlp.*"})), (std::vector<std::string>{"wq", "mlp.*"}));
}

}  // namespace
}  // namespace ndt
