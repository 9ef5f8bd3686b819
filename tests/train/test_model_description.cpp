// A model's description (interchange/model_description.h), the class of issue 35: every
// model.* key that shapes the model or its math is in the description a checkpoint or a
// safetensors file carries, reads back, and is named when a resume or init_from differs;
// a key a model does not use (gpt2's n_kv_head, a dense model's moe_*) is not, so it
// cannot refuse a model that is the same.
#include "interchange/model_description.h"
#include "train/config.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace ndt {
namespace {

// Each model.* key of `ndtrain config` with a second valid value for it, and the config
// (a family and MoE or dense) in which it shapes the model. A key missing here fails the
// test: a new model key must be described or declared as not shaping the model.
struct KeyCase {
  std::string other;  // the value tried
  // "gpt2", "llama", "llama3" (llama with rope_scaling llama3) or "moe" (llama, 4 experts,
  // every second block, shared MLP)
  std::string base;
};
const std::map<std::string, KeyCase>& key_cases() {
  static const std::map<std::string, KeyCase> cases = {
      {"model.arch", {"llama", "gpt2"}},
      {"model.vocab_size", {"300", "gpt2"}},
      {"model.max_seq_len", {"64", "gpt2"}},
      {"model.n_layer", {"3", "gpt2"}},
      {"model.n_head", {"8", "gpt2"}},
      {"model.n_kv_head", {"4", "llama"}},
      {"model.d_model", {"96", "gpt2"}},
      {"model.d_ff", {"200", "gpt2"}},
      {"model.qk_norm", {"true", "gpt2"}},
      {"model.tied_embeddings", {"true", "llama"}},
      {"model.norm_eps", {"1e-6", "gpt2"}},
      {"model.rope_theta", {"500000", "llama"}},
      {"model.qkv_bias", {"true", "llama"}},
      {"model.rope_scaling", {"llama3", "llama"}},
      {"model.rope_scaling_factor", {"32", "llama3"}},
      {"model.rope_low_freq_factor", {"2", "llama3"}},
      {"model.rope_high_freq_factor", {"8", "llama3"}},
      {"model.rope_original_max_seq_len", {"64", "llama3"}},
      {"model.n_experts", {"8", "moe"}},
      {"model.moe_top_k", {"1", "moe"}},
      {"model.moe_every", {"1", "moe"}},
      {"model.moe_d_ff", {"80", "moe"}},
      {"model.moe_shared_d_ff", {"0", "moe"}},
      {"model.moe_score", {"sigmoid", "moe"}},
      {"model.moe_normalize_top_k", {"false", "moe"}},
      {"model.moe_capacity_factor", {"1.25", "moe"}},
      {"model.moe_aux_loss", {"0.001", "moe"}},
      {"model.moe_z_loss", {"0.001", "moe"}},
  };
  return cases;
}
// Keys that do not describe the model: the preset (its fields are the keys above) and
// the initialisation, which shapes only the start.
const std::set<std::string> kNotDescribed = {"model.preset", "model.init_std"};

std::vector<std::string> base_sets(const std::string& base) {
  if (base == "gpt2") return {"model.preset=gpt2-tiny"};
  if (base == "llama") return {"model.preset=llama-tiny"};
  if (base == "llama3") return {"model.preset=llama-tiny", "model.rope_scaling=llama3"};
  return {"model.preset=llama-tiny", "model.n_experts=4", "model.moe_top_k=2", "model.moe_every=2",
          "model.moe_d_ff=96", "model.moe_shared_d_ff=64"};
}

ModelConfig model_with(const std::vector<std::string>& sets) { return read_run_config("", sets).model; }

// Catches: a model key left out of the description (an MoE checkpoint read back as a
// dense model, moe_top_k or the router score changed on resume without a word).
TEST(ModelDescription, EveryModelKeyIsDescribedReadBackAndNamedWhenItDiffers) {
  for (const ConfigFieldDoc& doc : config_field_docs()) {
    if (!doc.key.starts_with("model.") || kNotDescribed.count(doc.key)) continue;
    SCOPED_TRACE(doc.key);
    const auto it = key_cases().find(doc.key);
    ASSERT_NE(it, key_cases().end()) << "a new model key: add it to key_cases() (or to kNotDescribed if it does not "
                                        "shape the model or its math)";
    const std::vector<std::string> sets = base_sets(it->second.base);
    std::vector<std::string> changed = sets;
    changed.push_back(doc.key + "=" + it->second.other);
    const ModelConfig a = model_with(sets), b = model_with(changed);
    a.validate();
    b.validate();
    EXPECT_NE(config_fields(a), config_fields(b)) << "the description does not carry the key";
    // Read back, each describes its own model again.
    EXPECT_EQ(config_fields(config_from_fields(config_fields(b), "test")), config_fields(b));
    const std::string differences = config_differences(a, b, "saved");
    const std::string field = doc.key.substr(6);
    EXPECT_NE(differences.find("model." + field + " = "), std::string::npos) << differences;
  }
}

// Catches: a key the model does not use refusing the same model (a gpt2 model's own
// llm.c export refused by init_from over n_kv_head), and descriptions written before MoE
// keys existed (gpt2 with n_kv_head, no n_experts) not reading as the dense model.
TEST(ModelDescription, KeysAModelDoesNotUseAreNotCompared) {
  const std::vector<std::pair<std::string, std::string>> unused = {
      {"gpt2", "model.n_kv_head=2"},         {"gpt2", "model.rope_theta=1000"},
      {"gpt2", "model.moe_top_k=1"},         {"llama", "model.moe_score=sigmoid"},
      {"llama", "model.moe_capacity_factor=2"}, {"gpt2", "model.qkv_bias=true"},
      {"llama", "model.rope_scaling_factor=16"}};
  for (const auto& [base, set] : unused) {
    SCOPED_TRACE(base + " " + set);
    std::vector<std::string> changed = base_sets(base);
    changed.push_back(set);
    EXPECT_EQ(config_fields(model_with(base_sets(base))), config_fields(model_with(changed)));
    EXPECT_EQ(config_differences(model_with(base_sets(base)), model_with(changed), "saved"), "");
  }
  // Every block an expert block: d_ff is not the model's (moe_d_ff is).
  std::vector<std::string> all_moe = base_sets("moe");
  all_moe.push_back("model.moe_every=1");
  std::vector<std::string> other_d_ff = all_moe;
  other_d_ff.push_back("model.d_ff=1000");
  EXPECT_EQ(config_fields(model_with(all_moe)), config_fields(model_with(other_d_ff)));

  const std::map<std::string, std::string> before_moe = {
      {"arch", "gpt2"},       {"vocab_size", "256"},      {"max_seq_len", "64"},   {"n_layer", "2"},
      {"n_head", "6"},        {"n_kv_head", "4"},         {"d_model", "96"},       {"d_ff", "384"},
      {"qk_norm", "false"},   {"tied_embeddings", "true"}, {"norm_eps", "1e-05"},  {"rope_theta", "10000"}};
  const ModelConfig old = config_from_fields(before_moe, "old");
  EXPECT_FALSE(old.is_moe());
  EXPECT_EQ(old.kv_heads(), 6);
  EXPECT_EQ(config_fields(old).count("n_kv_head"), 0u);
}

// Catches: a description missing a field it needs read as some default model.
TEST(ModelDescription, MissingOrBadFieldsAreNamed) {
  ModelConfig moe = model_with(base_sets("moe"));
  std::map<std::string, std::string> fields = config_fields(moe);
  fields.erase("moe_top_k");
  try {
    config_from_fields(fields, "checkpoint x");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "checkpoint x: model config lacks field moe_top_k");
  }
  fields = config_fields(moe);
  fields["moe_score"] = "relu";
  try {
    config_from_fields(fields, "checkpoint x");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "checkpoint x: model config field moe_score = \"relu\" does not parse");
  }
}

}  // namespace
}  // namespace ndt
