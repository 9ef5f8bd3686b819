// optim.weight_decay_policy (optim/weight_decay.h): which parameters each policy decays,
// on both model families, and that AdamW follows the choice.
#include "../common/errors.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "optim/weight_decay.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace ndt {
namespace {

std::set<std::string> decayed_under(const ModelConfig& config, WeightDecayPolicy policy) {
  Transformer model(config, 5, 256, /*materialize_parameters=*/false);
  apply_weight_decay_policy(model.store(), policy);
  std::set<std::string> names;
  for (const Parameter& p : model.store().params()) {
    if (p.spec.weight_decay) names.insert(p.name());
  }
  return names;
}

std::set<std::string> all_parameters(const ModelConfig& config) {
  std::set<std::string> names;
  for (const ParameterSpec& s : model_parameter_specs(config)) names.insert(s.name);
  return names;
}

ModelConfig one_layer(const char* preset) {
  ModelConfig c = ModelConfig::preset(preset);
  c.n_layer = 1;
  return c;
}

// Catches: a policy decaying the wrong set (norms or biases under "matrices_and_embeddings",
// embeddings under "matrices", anything left out under "all").
TEST(WeightDecayPolicy, Gpt2Parameters) {
  const ModelConfig c = one_layer("gpt2-tiny");
  const std::set<std::string> matrices = {"blocks.0.attn.wq.weight", "blocks.0.attn.wk.weight",
                                          "blocks.0.attn.wv.weight", "blocks.0.attn.wo.weight",
                                          "blocks.0.mlp.fc.weight",  "blocks.0.mlp.proj.weight"};
  EXPECT_EQ(decayed_under(c, WeightDecayPolicy::matrices), matrices);
  std::set<std::string> with_embeddings = matrices;
  with_embeddings.insert({"wte.weight", "wpe.weight"});
  EXPECT_EQ(decayed_under(c, WeightDecayPolicy::matrices_and_embeddings), with_embeddings);
  EXPECT_EQ(decayed_under(c, WeightDecayPolicy::all), all_parameters(c));
}

TEST(WeightDecayPolicy, LlamaParameters) {
  ModelConfig c = one_layer("llama-tiny");
  c.qk_norm = true;
  const std::set<std::string> matrices = {"blocks.0.attn.wq.weight", "blocks.0.attn.wk.weight",
                                          "blocks.0.attn.wv.weight", "blocks.0.attn.wo.weight",
                                          "blocks.0.mlp.gate.weight", "blocks.0.mlp.up.weight",
                                          "blocks.0.mlp.down.weight", "lm_head.weight"};
  EXPECT_EQ(decayed_under(c, WeightDecayPolicy::matrices), matrices);
  std::set<std::string> with_embeddings = matrices;
  with_embeddings.insert("wte.weight");
  EXPECT_EQ(decayed_under(c, WeightDecayPolicy::matrices_and_embeddings), with_embeddings);
  const std::set<std::string> all = decayed_under(c, WeightDecayPolicy::all);
  EXPECT_EQ(all, all_parameters(c));
  EXPECT_TRUE(all.count("blocks.0.attn.q_norm.weight"));
}

// Catches: the policy set on the specs but not read by AdamW's step.
TEST(WeightDecayPolicy, AdamWDecaysTheEmbeddingOnlyWhenThePolicySaysSo) {
  for (WeightDecayPolicy policy : {WeightDecayPolicy::matrices, WeightDecayPolicy::matrices_and_embeddings}) {
    Transformer model(one_layer("gpt2-tiny"), 5);
    ParameterStore& store = model.store();
    apply_weight_decay_policy(store, policy);
    const Parameter& wte = store.get("wte.weight");
    const std::vector<float> before(wte.data(), wte.data() + wte.numel());
    store.zero_grads();  // zero gradient: only weight decay moves parameters
    AdamW(store, AdamWConfig{0.9f, 0.95f, 1e-8f, 0.5f}).step(0.1f, 1.0f);
    const float factor = policy == WeightDecayPolicy::matrices ? 1.0f : 1.0f - 0.1f * 0.5f;
    for (int64_t i = 0; i < wte.numel(); ++i) {
      ASSERT_FLOAT_EQ(wte.data()[i], before[i] * factor) << weight_decay_policy_name(policy) << " element " << i;
    }
  }
}

TEST(WeightDecayPolicy, NamesRoundTripAndUnknownNamesListTheChoices) {
  for (const std::string& name : weight_decay_policy_names()) {
    EXPECT_EQ(weight_decay_policy_name(weight_decay_policy_from_name(name)), name);
  }
  testing::expect_error([] { weight_decay_policy_from_name("everything"); },
                        {"optim.weight_decay_policy = \"everything\"", "matrices, matrices_and_embeddings, all"});
}

}  // namespace
}  // namespace ndt
