// train.freeze's patterns (model/freeze.h): what each form matches, the aliases, the
// frozen specs' place in the arenas, and a pattern that matches nothing.
#include "../common/errors.h"
#include "model/freeze.h"
#include "model/transformer.h"
#include "parallel/memory_model.h"

#include <gtest/gtest.h>

namespace ndt {
namespace {

TEST(FreezePatterns, SegmentsRangesGlobsAndPrefixes) {
  EXPECT_TRUE(freeze_pattern_matches("blocks.0-11.attn", "blocks.3.attn.wq.weight"));
  EXPECT_TRUE(freeze_pattern_matches("blocks.0-11.attn", "blocks.11.attn.wo.bias"));
  EXPECT_FALSE(freeze_pattern_matches("blocks.0-11.attn", "blocks.12.attn.wq.weight"));
  EXPECT_FALSE(freeze_pattern_matches("blocks.0-11.attn", "blocks.3.mlp.fc.weight"));
  EXPECT_TRUE(freeze_pattern_matches("blocks.*.mlp", "blocks.7.mlp.proj.weight"));
  EXPECT_TRUE(freeze_pattern_matches("blocks.1.attn.w*", "blocks.1.attn.wk.weight"));
  EXPECT_FALSE(freeze_pattern_matches("blocks.1.attn.w*", "blocks.1.attn.q_norm.weight"));
  EXPECT_FALSE(freeze_pattern_matches("blocks.1", "blocks.10.ln1.weight"));  // whole segments, not text prefixes
  EXPECT_TRUE(freeze_pattern_matches("wte.weight", "wte.weight"));
  EXPECT_FALSE(freeze_pattern_matches("wte.weight.x", "wte.weight"));
}

TEST(FreezePatterns, Aliases) {
  EXPECT_TRUE(freeze_pattern_matches("embeddings", "wte.weight"));
  EXPECT_TRUE(freeze_pattern_matches("embeddings", "wpe.weight"));
  EXPECT_FALSE(freeze_pattern_matches("embeddings", "lnf.weight"));
  EXPECT_TRUE(freeze_pattern_matches("head", "lnf.weight"));
  EXPECT_TRUE(freeze_pattern_matches("head", "lm_head.weight"));
  EXPECT_FALSE(freeze_pattern_matches("head", "blocks.0.ln1.weight"));
}

TEST(FreezePatterns, APatternMatchingNothingIsNamed) {
  ModelConfig c = ModelConfig::preset("gpt2-tiny");
  c.freeze = {"embeddings", "blocks.9.attn"};
  testing::expect_error([&] { model_parameter_specs(c); },
                        {"train.freeze: pattern \"blocks.9.attn\" matches no parameter", "wte.weight"});
  c.freeze = {""};
  testing::expect_error([&] { model_parameter_specs(c); }, {"train.freeze: an empty pattern"});
}

// Frozen parameters keep their place in the value arena and have none in the gradient
// arena; the memory model counts them in params only.
TEST(FreezePatterns, FrozenParametersHaveNoGradientsOrMoments) {
  ModelConfig c = ModelConfig::preset("gpt2-tiny");
  c.freeze = {"embeddings", "blocks.0"};
  Transformer model(c, 1);
  ParameterStore& store = model.store();
  int64_t frozen = 0;
  for (const Parameter& p : store.params()) frozen += p.trainable() ? 0 : p.numel();
  ASSERT_GT(frozen, 0);
  EXPECT_EQ(store.grad_numel(), store.numel() - frozen);
  store.zero_grads();
  for (const Parameter& p : store.params()) {
    EXPECT_EQ(p.grad.defined(), p.trainable()) << p.name();
    EXPECT_TRUE(p.value.defined()) << p.name();
  }
  const std::vector<ParameterSpec> specs = model_parameter_specs(c);
  ModelConfig all = c;
  all.freeze.clear();
  for (int stage : {0, 1, 2, 3}) {
    const ModelStateBytes f = predict_model_states(specs, 2, stage), w = predict_model_states(model_parameter_specs(all), 2, stage);
    EXPECT_EQ(f.params, w.params) << "stage " << stage;
    EXPECT_LT(f.grads, w.grads) << "stage " << stage;
    EXPECT_LT(f.optimizer, w.optimizer) << "stage " << stage;
  }
  EXPECT_EQ(predict_model_states(specs, 1, 0).grads, 4 * store.grad_numel());
  EXPECT_EQ(predict_model_states(specs, 1, 0).optimizer, 8 * store.grad_numel());
}

// Catches: MFU counting weight gradients a frozen weight never gets (a LoRA run above 100%).
TEST(FreezePatterns, FrozenWeightsCostNoWeightGradientFlops) {
  ModelConfig c = ModelConfig::preset("gpt2-tiny");
  const double whole = Transformer(c, 1).flops_per_token(64);
  c.freeze = {"blocks.1.mlp"};
  int64_t frozen = 0;
  for (const ParameterSpec& s : model_parameter_specs(c)) frozen += s.frozen ? shape_numel(s.logical_shape) : 0;
  ASSERT_GT(frozen, 0);
  EXPECT_DOUBLE_EQ(Transformer(c, 1).flops_per_token(64), whole - 2.0 * static_cast<double>(frozen));
}

}  // namespace
}  // namespace ndt
