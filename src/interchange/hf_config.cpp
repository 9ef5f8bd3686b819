#include "interchange/hf_config.h"

#include "core/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <initializer_list>
#include <map>
#include <string_view>

namespace ndt {

namespace {

using nlohmann::json;

// Reads the fields of one config.json; every error names the file and the field.
class ConfigJson {
 public:
  ConfigJson(json j, std::string path) : j_(std::move(j)), path_(std::move(path)) {}
  const std::string& path() const { return path_; }
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const json& at(const char* key) const {
    NDT_CHECK(has(key), "{}: config.json lacks the field \"{}\"", path_, key);
    return j_.at(key);
  }
  int integer(const char* key) const {
    const json& v = at(key);
    NDT_CHECK(v.is_number_integer() && v.get<int64_t>() > 0 && v.get<int64_t>() <= INT32_MAX,
              "{}: config.json field \"{}\" = {} is not a positive integer", path_, key, v.dump());
    return v.get<int>();
  }
  int integer(const char* key, int absent) const { return has(key) ? integer(key) : absent; }
  float real(const char* key, float absent) const {
    if (!has(key)) return absent;
    NDT_CHECK(at(key).is_number(), "{}: config.json field \"{}\" = {} is not a number", path_, key, at(key).dump());
    return static_cast<float>(at(key).get<double>());
  }
  bool flag(const char* key, bool absent) const {
    if (!has(key)) return absent;
    NDT_CHECK(at(key).is_boolean(), "{}: config.json field \"{}\" = {} is not true or false", path_, key,
              at(key).dump());
    return at(key).get<bool>();
  }
  std::string text(const char* key, const std::string& absent) const {
    if (!has(key)) return absent;
    NDT_CHECK(at(key).is_string(), "{}: config.json field \"{}\" = {} is not a string", path_, key, at(key).dump());
    return at(key).get<std::string>();
  }
  // Refuses a value ndtrain does not compute, naming the field, the value and what it supports.
  void require(const char* key, bool supported, std::string_view what) const {
    NDT_CHECK(supported, "{}: config.json field \"{}\" = {} is not supported: {}", path_, key, at(key).dump(), what);
  }

 private:
  json j_;
  std::string path_;
};

const char* kFamilies = "gpt2, llama (Llama 2/3.x, SmolLM), qwen2, qwen3";

// A required integer field of config.json and the ModelConfig field it sets.
struct IntegerField {
  const char* key;
  int ModelConfig::*field;
};

void read_integers(const ConfigJson& j, ModelConfig& c, std::initializer_list<IntegerField> fields) {
  for (const IntegerField& f : fields) c.*f.field = j.integer(f.key);
}

ModelConfig read_gpt2(const ConfigJson& j) {
  ModelConfig c;
  c.set_arch(Arch::gpt2);
  read_integers(j, c, {{"vocab_size", &ModelConfig::vocab_size}, {"n_positions", &ModelConfig::max_seq_len},
                       {"n_embd", &ModelConfig::d_model}, {"n_layer", &ModelConfig::n_layer},
                       {"n_head", &ModelConfig::n_head}});
  c.n_kv_head = c.n_head;
  c.d_ff = j.integer("n_inner", 4 * c.d_model);
  c.norm_eps = j.real("layer_norm_epsilon", 1e-5f);
  c.tied_embeddings = j.flag("tie_word_embeddings", true);
  const std::string act = j.text("activation_function", "gelu_new");
  if (j.has("activation_function")) {
    j.require("activation_function", act == "gelu_new" || act == "gelu_pytorch_tanh",
              "ndtrain's GELU is the tanh approximation (gelu_new)");
  }
  return c;
}

// rope_scaling: null, or Llama 3's {"rope_type": "llama3", factor, low_freq_factor,
// high_freq_factor, original_max_position_embeddings}; older files say "type".
void read_rope_scaling(const ConfigJson& j, ModelConfig& c) {
  if (!j.has("rope_scaling")) return;
  const json& s = j.at("rope_scaling");
  NDT_CHECK(s.is_object(), "{}: config.json field \"rope_scaling\" = {} is not an object", j.path(), s.dump());
  const ConfigJson r(s, j.path() + " rope_scaling");
  const char* type_key = r.has("rope_type") ? "rope_type" : "type";
  const std::string type = r.text(type_key, "");
  NDT_CHECK(type == "llama3" || type == "default",
            "{}: config.json field \"rope_scaling\" has {} = \"{}\", which ndtrain does not implement (supported: "
            "llama3, or none)",
            j.path(), type_key, type);
  if (type == "default") return;
  c.rope_scaling = RopeScaling::llama3;
  c.rope_scaling_factor = r.real("factor", 0.0f);
  c.rope_low_freq_factor = r.real("low_freq_factor", 0.0f);
  c.rope_high_freq_factor = r.real("high_freq_factor", 0.0f);
  c.rope_original_max_seq_len = r.integer("original_max_position_embeddings");
}

ModelConfig read_llama_family(const ConfigJson& j, const std::string& type) {
  ModelConfig c;
  c.set_arch(Arch::llama);
  read_integers(j, c, {{"vocab_size", &ModelConfig::vocab_size}, {"max_position_embeddings", &ModelConfig::max_seq_len},
                       {"hidden_size", &ModelConfig::d_model}, {"num_hidden_layers", &ModelConfig::n_layer},
                       {"num_attention_heads", &ModelConfig::n_head}, {"intermediate_size", &ModelConfig::d_ff}});
  c.n_kv_head = j.integer("num_key_value_heads", c.n_head);
  c.norm_eps = j.real("rms_norm_eps", 1e-6f);
  c.rope_theta = j.real("rope_theta", 10000.0f);
  c.tied_embeddings = j.flag("tie_word_embeddings", false);
  c.qkv_bias = type == "qwen2";  // Qwen2's attention: biases on q, k, v (not o)
  c.qk_norm = type == "qwen3";
  if (j.has("hidden_act")) j.require("hidden_act", j.text("hidden_act", "") == "silu", "ndtrain's MLP is SwiGLU (silu)");
  if (j.has("head_dim")) {
    j.require("head_dim", j.at("head_dim").is_number_integer() && j.at("head_dim").get<int>() * c.n_head == c.d_model,
              fmt::format("ndtrain's head dimension is hidden_size / num_attention_heads = {}", c.d_model / c.n_head));
  }
  if (type != "qwen2" && j.flag("attention_bias", false)) {
    j.require("attention_bias", false, "ndtrain has biases on q, k, v (Qwen2) but none on o_proj");
  }
  if (j.flag("mlp_bias", false)) j.require("mlp_bias", false, "ndtrain's llama MLP has no biases");
  if (j.flag("use_sliding_window", false)) j.require("use_sliding_window", false, "attention is over the whole context");
  read_rope_scaling(j, c);
  return c;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  NDT_CHECK(in, "cannot open {}", path);
  try {
    json j = json::parse(in);
    NDT_CHECK(j.is_object(), "{} is not a JSON object", path);
    return j;
  } catch (const json::exception& e) {
    fail("{} is not valid JSON: {}", path, e.what());
  }
}

// The family: model_type, checked against architectures when the file has both.
std::string family_of(const ConfigJson& j) {
  static const std::map<std::string, std::string> architectures = {{"GPT2LMHeadModel", "gpt2"},
                                                                    {"LlamaForCausalLM", "llama"},
                                                                    {"Qwen2ForCausalLM", "qwen2"},
                                                                    {"Qwen3ForCausalLM", "qwen3"}};
  const std::string type = j.text("model_type", "");
  NDT_CHECK(type == "gpt2" || type == "llama" || type == "qwen2" || type == "qwen3",
            "{}: config.json field \"model_type\" = \"{}\" is not a family ndtrain reads ({})", j.path(), type, kFamilies);
  if (!j.has("architectures")) return type;
  const json& a = j.at("architectures");
  const bool known = a.is_array() && a.size() == 1 && a[0].is_string() && architectures.count(a[0].get<std::string>());
  NDT_CHECK(known && architectures.at(a[0].get<std::string>()) == type,
            "{}: config.json field \"architectures\" = {} is not the causal LM of model_type \"{}\" (ndtrain reads "
            "GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)",
            j.path(), a.dump(), type);
  return type;
}

// A float as its shortest decimal form, so 1e-5f is written 1e-05, not 9.99999974e-06.
double decimal(float v) { return std::stod(fmt::format("{}", v)); }

json llama_family_json(const ModelConfig& c) {
  json j = {{"hidden_size", c.d_model},        {"intermediate_size", c.d_ff},
            {"num_hidden_layers", c.n_layer},  {"num_attention_heads", c.n_head},
            {"num_key_value_heads", c.n_kv_head}, {"max_position_embeddings", c.max_seq_len},
            {"rms_norm_eps", decimal(c.norm_eps)}, {"rope_theta", decimal(c.rope_theta)},
            {"hidden_act", "silu"},            {"attention_bias", false},
            {"head_dim", c.head_dim()},        {"rope_scaling", nullptr}};
  if (c.rope_scaling == RopeScaling::llama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", decimal(c.rope_scaling_factor)},
                         {"low_freq_factor", decimal(c.rope_low_freq_factor)},
                         {"high_freq_factor", decimal(c.rope_high_freq_factor)},
                         {"original_max_position_embeddings", c.rope_original_max_seq_len}};
  }
  return j;
}

}  // namespace

ModelConfig read_hf_config(const std::string& path) {
  const ConfigJson j(read_json(path), path);
  const std::string type = family_of(j);
  ModelConfig c = type == "gpt2" ? read_gpt2(j) : read_llama_family(j, type);
  try {
    c.validate();
  } catch (const Error& e) {
    fail("{}: the model config.json describes is invalid: {}", path, e.what());
  }
  return c;
}

std::string hf_config_json(const ModelConfig& c, const std::string& torch_dtype) {
  NDT_CHECK(!c.is_moe(), "model.n_experts = {}: Hugging Face model folders are written for dense models only",
            c.n_experts);
  json j;
  if (c.arch == Arch::gpt2) {
    NDT_CHECK(!c.qk_norm, "model.qk_norm = true: transformers' GPT-2 has no QK-norm (write *.safetensors instead)");
    j = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"n_embd", c.d_model},
         {"n_layer", c.n_layer}, {"n_head", c.n_head}, {"n_inner", c.d_ff}, {"n_positions", c.max_seq_len},
         {"n_ctx", c.max_seq_len}, {"layer_norm_epsilon", decimal(c.norm_eps)}, {"activation_function", "gelu_new"}};
  } else {
    NDT_CHECK(!(c.qk_norm && c.qkv_bias), "model.qk_norm and model.qkv_bias are both true: no transformers family "
              "has both (qwen2: q/k/v bias, qwen3: QK-norm)");
    const std::string type = c.qk_norm ? "qwen3" : c.qkv_bias ? "qwen2" : "llama";
    const std::string arch = type == "qwen3" ? "Qwen3ForCausalLM" : type == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
    j = llama_family_json(c);
    j["architectures"] = {arch};
    j["model_type"] = type;
  }
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

}  // namespace ndt
