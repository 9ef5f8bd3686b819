#include "interchange/model_description.h"

#include "core/error.h"
#include "core/text_list.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>

namespace ndt {

namespace {

std::string flag(bool b) { return b ? "true" : "false"; }

}  // namespace

std::map<std::string, std::string> config_fields(const ModelConfig& c) {
  std::map<std::string, std::string> f = {{"arch", std::string(arch_name(c.arch))},
                                          {"vocab_size", std::to_string(c.vocab_size)},
                                          {"max_seq_len", std::to_string(c.max_seq_len)},
                                          {"n_layer", std::to_string(c.n_layer)},
                                          {"n_head", std::to_string(c.n_head)},
                                          {"d_model", std::to_string(c.d_model)},
                                          {"qk_norm", flag(c.qk_norm)},
                                          {"tied_embeddings", flag(c.tied_embeddings)},
                                          {"norm_eps", fmt::format("{}", c.norm_eps)},
                                          {"n_experts", std::to_string(c.n_experts)}};
  if (c.has_dense_block()) f["d_ff"] = std::to_string(c.d_ff);
  if (c.arch == Arch::llama) {
    f["n_kv_head"] = std::to_string(c.n_kv_head);
    f["rope_theta"] = fmt::format("{}", c.rope_theta);
    f["qkv_bias"] = flag(c.qkv_bias);
    f["rope_scaling"] = std::string(rope_scaling_name(c.rope_scaling));
    if (c.rope_scaling == RopeScaling::llama3) {
      f["rope_scaling_factor"] = fmt::format("{}", c.rope_scaling_factor);
      f["rope_low_freq_factor"] = fmt::format("{}", c.rope_low_freq_factor);
      f["rope_high_freq_factor"] = fmt::format("{}", c.rope_high_freq_factor);
      f["rope_original_max_seq_len"] = std::to_string(c.rope_original_max_seq_len);
    }
  }
  if (c.is_moe()) {
    f["moe_top_k"] = std::to_string(c.moe_top_k);
    f["moe_every"] = std::to_string(c.moe_every);
    f["moe_d_ff"] = std::to_string(c.expert_d_ff());
    f["moe_shared_d_ff"] = std::to_string(c.moe_shared_d_ff);
    f["moe_score"] = std::string(moe_score_name(c.moe_score));
    f["moe_normalize_top_k"] = flag(c.moe_normalize_top_k);
    f["moe_capacity_factor"] = fmt::format("{}", c.moe_capacity_factor);
    f["moe_aux_loss"] = fmt::format("{}", c.moe_aux_loss);
    f["moe_z_loss"] = fmt::format("{}", c.moe_z_loss);
  }
  if (c.lora.enabled()) {
    f["lora_targets"] = string_list_text(c.lora.targets);
    f["lora_rank"] = std::to_string(c.lora.rank);
    f["lora_alpha"] = fmt::format("{}", c.lora.alpha);
  }
  return f;
}

const std::vector<std::string>& objective_only_fields() {
  static const std::vector<std::string> fields = {"moe_aux_loss", "moe_z_loss"};
  return fields;
}

std::string config_differences(const ModelConfig& theirs, const ModelConfig& ours, std::string_view where,
                               const std::set<std::string>& ignored, std::string_view ours_where) {
  const auto a = config_fields(theirs), b = config_fields(ours);
  std::string differences;
  for (const auto& [key, value] : b) {
    const auto it = a.find(key);
    if (ignored.count(key) || it == a.end() || it->second == value) continue;
    differences += fmt::format("; model.{} = {} {}, {} {}", key, it->second, where, value, ours_where);
  }
  return differences;
}

namespace {

// Reads fields by name for config_from_fields; every error names the source.
class FieldReader {
 public:
  FieldReader(const std::map<std::string, std::string>& fields, const std::string& source)
      : fields_(fields), source_(source) {}
  bool has(const char* key) const { return fields_.count(key) > 0; }
  const std::string& get(const char* key) const {
    auto it = fields_.find(key);
    NDT_CHECK(it != fields_.end(), "{}: model config lacks field {}", source_, key);
    return it->second;
  }
  [[noreturn]] void bad(const char* key) const {
    fail("{}: model config field {} = \"{}\" does not parse", source_, key, get(key));
  }
  int integer(const char* key) const {
    const std::string& s = get(key);
    int v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size()) bad(key);
    return v;
  }
  float real(const char* key) const {
    const std::string& s = get(key);
    char* end = nullptr;
    float v = std::strtof(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size()) bad(key);
    return v;
  }
  // A named value (arch, moe_score): a name `parse` refuses is a field that does not parse.
  template <typename Parse>
  auto named(const char* key, Parse parse) const {
    try {
      return parse(get(key));
    } catch (const Error&) {
      bad(key);
    }
  }
  bool boolean(const char* key) const {
    if (get(key) != "true" && get(key) != "false") bad(key);
    return get(key) == "true";
  }

 private:
  const std::map<std::string, std::string>& fields_;
  const std::string& source_;
};

// A llama model's q/k/v bias and RoPE scaling; absent (saved before they existed): none.
void read_llama_fields(const FieldReader& r, ModelConfig& c) {
  c.rope_theta = r.real("rope_theta");
  c.qkv_bias = r.has("qkv_bias") && r.boolean("qkv_bias");
  c.rope_scaling = r.has("rope_scaling") ? r.named("rope_scaling", rope_scaling_from_name) : RopeScaling::none;
  if (c.rope_scaling == RopeScaling::none) return;
  c.rope_scaling_factor = r.real("rope_scaling_factor");
  c.rope_low_freq_factor = r.real("rope_low_freq_factor");
  c.rope_high_freq_factor = r.real("rope_high_freq_factor");
  c.rope_original_max_seq_len = r.integer("rope_original_max_seq_len");
}

void read_moe_fields(const FieldReader& r, ModelConfig& c) {
  c.n_experts = r.has("n_experts") ? r.integer("n_experts") : 0;  // absent: saved before MoE settings were
  if (c.n_experts == 0) return;
  c.moe_top_k = r.integer("moe_top_k");
  c.moe_every = r.integer("moe_every");
  c.moe_d_ff = r.integer("moe_d_ff");
  c.moe_shared_d_ff = r.integer("moe_shared_d_ff");
  c.moe_score = r.named("moe_score", moe_score_from_name);
  c.moe_normalize_top_k = r.boolean("moe_normalize_top_k");
  c.moe_capacity_factor = r.real("moe_capacity_factor");
  c.moe_aux_loss = r.real("moe_aux_loss");
  c.moe_z_loss = r.real("moe_z_loss");
}

void read_lora_fields(const FieldReader& r, ModelConfig& c) {
  if (!r.has("lora_targets")) return;  // no adapters
  try {
    c.lora.targets = parse_lora_targets(r.get("lora_targets"));
  } catch (const Error&) {
    r.bad("lora_targets");
  }
  c.lora.rank = r.integer("lora_rank");
  c.lora.alpha = r.real("lora_alpha");
}

}  // namespace

ModelConfig config_from_fields(const std::map<std::string, std::string>& fields, const std::string& source) {
  const FieldReader r(fields, source);
  ModelConfig c;
  c.arch = r.named("arch", arch_from_name);
  c.vocab_size = r.integer("vocab_size");
  c.max_seq_len = r.integer("max_seq_len");
  c.n_layer = r.integer("n_layer");
  c.n_head = r.integer("n_head");
  c.d_model = r.integer("d_model");
  c.qk_norm = r.boolean("qk_norm");
  c.tied_embeddings = r.boolean("tied_embeddings");
  c.norm_eps = r.real("norm_eps");
  // gpt2 uses neither key: its K/V heads are its heads, it has no RoPE.
  c.n_kv_head = c.arch == Arch::llama ? r.integer("n_kv_head") : c.n_head;
  if (c.arch == Arch::llama) read_llama_fields(r, c);
  read_moe_fields(r, c);
  read_lora_fields(r, c);
  // d_ff only where a block has a dense MLP; otherwise any valid width (the experts').
  c.d_ff = c.has_dense_block() || r.has("d_ff") ? r.integer("d_ff") : c.moe_d_ff;
  try {
    c.validate();
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  return c;
}

}  // namespace ndt
