#include "interchange/hf_names.h"

#include "core/error.h"
#include "interchange/safetensors.h"

#include <fmt/ranges.h>

namespace ndt {

namespace {

// One Hugging Face tensor: the ndtrain tensors it holds, concatenated along dim 0
// (GPT-2's c_attn is q|k|v), and whether it is stored transposed ([in, out], Conv1D).
struct HfTensor {
  std::string name;
  std::vector<std::string> parts;
  bool transposed = false;
};

// The Hugging Face tensors of a config, in model order. gpt2_prefix is "transformer."
// or "" (GPT2Model checkpoints). GPT-2 q_norm/k_norm and an untied GPT-2 lm_head have
// no transformers counterpart: they keep ndtrain-style names so a round trip loses nothing.
std::vector<HfTensor> hf_tensors(const ModelConfig& c, const std::string& gpt2_prefix) {
  std::vector<HfTensor> out;
  auto add = [&](std::string name, std::vector<std::string> parts, bool transposed = false) {
    out.push_back({std::move(name), std::move(parts), transposed});
  };
  const bool gpt2 = c.arch == Arch::gpt2;
  const std::string& t = gpt2_prefix;
  add(gpt2 ? t + "wte.weight" : "model.embed_tokens.weight", {"wte.weight"});
  if (gpt2) add(t + "wpe.weight", {"wpe.weight"});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    const std::string h =
        gpt2 ? t + "h." + std::to_string(l) + "." : "model.layers." + std::to_string(l) + ".";
    const std::string attn = gpt2 ? h + "attn." : h + "self_attn.";
    if (gpt2) {
      for (const std::string s : {"weight", "bias"}) {
        const bool w = s == "weight";
        add(h + "ln_1." + s, {b + "ln1." + s});
        add(attn + "c_attn." + s, {b + "attn.wq." + s, b + "attn.wk." + s, b + "attn.wv." + s}, w);
        add(attn + "c_proj." + s, {b + "attn.wo." + s}, w);
        add(h + "ln_2." + s, {b + "ln2." + s});
        add(h + "mlp.c_fc." + s, {b + "mlp.fc." + s}, w);
        add(h + "mlp.c_proj." + s, {b + "mlp.proj." + s}, w);
      }
    } else {
      add(h + "input_layernorm.weight", {b + "ln1.weight"});
      for (const std::string x : {"q", "k", "v", "o"}) {
        add(attn + x + "_proj.weight", {b + "attn.w" + x + ".weight"});
      }
      add(h + "post_attention_layernorm.weight", {b + "ln2.weight"});
      for (const std::string x : {"gate", "up", "down"}) {
        add(h + "mlp." + x + "_proj.weight", {b + "mlp." + x + ".weight"});
      }
    }
    if (c.qk_norm) {
      add(attn + "q_norm.weight", {b + "attn.q_norm.weight"});
      add(attn + "k_norm.weight", {b + "attn.k_norm.weight"});
    }
  }
  add(gpt2 ? t + "ln_f.weight" : "model.norm.weight", {"lnf.weight"});
  if (gpt2) add(t + "ln_f.bias", {"lnf.bias"});
  if (!c.tied_embeddings) add("lm_head.weight", {"lm_head.weight"});
  return out;
}

std::map<std::string, Shape> spec_shapes(const ModelConfig& c) {
  std::map<std::string, Shape> shapes;
  for (const ParameterSpec& s : model_parameter_specs(c)) shapes[s.name] = s.logical_shape;
  return shapes;
}

// Shape of the parts concatenated along dim 0, in ndtrain's [out, in] layout.
Shape fused_shape(const HfTensor& t, const std::map<std::string, Shape>& shapes) {
  Shape shape = shapes.at(t.parts[0]);
  shape[0] = 0;
  for (const std::string& p : t.parts) shape[0] += shapes.at(p)[0];
  return shape;
}

// a is [rows, cols]; returns [cols, rows].
std::vector<float> transpose(const std::vector<float>& a, int64_t rows, int64_t cols) {
  std::vector<float> out(a.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = a[r * cols + c];
  }
  return out;
}

SafetensorsTensor to_hf(const HfTensor& t, const ModelState& state,
                        const std::map<std::string, Shape>& shapes) {
  const Shape shape = fused_shape(t, shapes);
  std::vector<float> fused;
  for (const std::string& p : t.parts) {
    const std::vector<float>& v = state.tensors.at(p);
    fused.insert(fused.end(), v.begin(), v.end());
  }
  if (!t.transposed) return {shape, std::move(fused)};
  return {{shape[1], shape[0]}, transpose(fused, shape[0], shape[1])};
}

void from_hf(const HfTensor& t, SafetensorsTensor hf, const std::map<std::string, Shape>& shapes,
             ModelState& state, const std::string& path) {
  const Shape fused = fused_shape(t, shapes);
  const Shape expected = t.transposed ? Shape{fused[1], fused[0]} : fused;
  NDT_CHECK(hf.shape == expected, "safetensors {}: tensor {} has shape {}, expected {}", path, t.name,
            shape_str(hf.shape), shape_str(expected));
  const std::vector<float> data =
      t.transposed ? transpose(hf.values, fused[1], fused[0]) : std::move(hf.values);
  size_t at = 0;
  for (const std::string& p : t.parts) {
    const auto n = static_cast<size_t>(shape_numel(shapes.at(p)));
    state.tensors[p].assign(data.begin() + at, data.begin() + at + n);
    at += n;
  }
}

// The config from the tensor shapes, with what shapes cannot tell taken from the hint.
ModelConfig infer_config(const std::map<std::string, SafetensorsTensor>& tensors, const std::string& t,
                         const std::optional<ModelConfig>& hint, const std::string& path) {
  const bool gpt2 = tensors.count(t + "wte.weight") > 0;
  NDT_CHECK(gpt2 || tensors.count("model.embed_tokens.weight"),
            "safetensors {}: found neither transformer.wte.weight (GPT-2) nor model.embed_tokens.weight "
            "(Llama): cannot tell the architecture",
            path);
  NDT_CHECK(hint.has_value(),
            "safetensors {} has no ndtrain config metadata and no config hint was given: n_head cannot "
            "be inferred from tensor shapes (the hint supplies n_head, norm_eps, rope_theta{})",
            path, gpt2 ? "" : ", max_seq_len");
  auto dim = [&](const std::string& name, int d) {
    auto it = tensors.find(name);
    NDT_CHECK(it != tensors.end(), "safetensors {}: missing tensor {}", path, name);
    NDT_CHECK(it->second.shape.size() == 2, "safetensors {}: tensor {} has shape {}, expected 2 dims", path,
              name, shape_str(it->second.shape));
    return static_cast<int>(it->second.shape[d]);
  };
  auto count_layers = [&](const std::string& prefix, const std::string& suffix) {
    int n = 0;
    while (tensors.count(prefix + std::to_string(n) + suffix)) ++n;
    return n;
  };
  ModelConfig c = *hint;
  if (gpt2) {
    c.arch = Arch::gpt2;
    c.vocab_size = dim(t + "wte.weight", 0);
    c.d_model = dim(t + "wte.weight", 1);
    c.max_seq_len = dim(t + "wpe.weight", 0);
    c.n_layer = count_layers(t + "h.", ".ln_1.weight");
    c.d_ff = dim(t + "h.0.mlp.c_fc.weight", 1);
    c.n_kv_head = c.n_head;
    c.qk_norm = tensors.count(t + "h.0.attn.q_norm.weight") > 0;
    c.tied_embeddings = true;
  } else {
    const std::string l0 = "model.layers.0.";
    c.arch = Arch::llama;
    c.vocab_size = dim("model.embed_tokens.weight", 0);
    c.d_model = dim("model.embed_tokens.weight", 1);
    c.n_layer = count_layers("model.layers.", ".input_layernorm.weight");
    c.d_ff = dim(l0 + "mlp.gate_proj.weight", 0);
    const int head_dim = c.n_head > 0 ? c.d_model / c.n_head : 0;
    c.n_kv_head = head_dim > 0 ? dim(l0 + "self_attn.k_proj.weight", 0) / head_dim : 0;
    c.qk_norm = tensors.count(l0 + "self_attn.q_norm.weight") > 0;
    c.tied_embeddings = tensors.count("lm_head.weight") == 0;
  }
  try {
    c.validate();
  } catch (const Error& e) {
    fail("safetensors {}: the config inferred from tensor shapes is invalid: {}", path, e.what());
  }
  return c;
}

}  // namespace

void save_safetensors_hf(const ModelState& state, const std::string& path, DType dtype) {
  check_model_state(state);
  SafetensorsFile file;
  file.metadata = config_fields(state.config);
  file.metadata["format"] = "pt";  // transformers refuses safetensors without it
  const auto shapes = spec_shapes(state.config);
  for (const HfTensor& t : hf_tensors(state.config, "transformer.")) {
    file.tensors[t.name] = to_hf(t, state, shapes);
  }
  write_safetensors(path, file, dtype);
}

ModelState load_safetensors_hf(const std::string& path, std::optional<ModelConfig> config_hint) {
  SafetensorsFile file = read_safetensors(path);
  const std::string prefix =
      file.tensors.count("wte.weight") && !file.tensors.count("transformer.wte.weight") ? "" : "transformer.";
  bool has_metadata = false;
  for (const auto& [key, value] : config_fields(ModelConfig{})) has_metadata |= file.metadata.count(key) > 0;
  ModelState state{has_metadata ? config_from_fields(file.metadata, "safetensors " + path + " metadata")
                                : infer_config(file.tensors, prefix, config_hint, path),
                   {}};

  const auto shapes = spec_shapes(state.config);
  for (const HfTensor& t : hf_tensors(state.config, prefix)) {
    auto node = file.tensors.extract(t.name);
    NDT_CHECK(!node.empty(), "safetensors {}: missing tensor {} (ndtrain {})", path, t.name,
              fmt::join(t.parts, ", "));
    from_hf(t, std::move(node.mapped()), shapes, state, path);
  }
  const bool gpt2 = state.config.arch == Arch::gpt2;
  std::vector<std::string> extra;
  for (const auto& [name, tensor] : file.tensors) {
    const bool buffer = gpt2 && (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"));
    const bool tied_head = state.config.tied_embeddings && name == "lm_head.weight";
    if (!buffer && !tied_head) extra.push_back(name);
  }
  NDT_CHECK(extra.empty(), "safetensors {}: unexpected tensors for this {} config: {}", path,
            arch_name(state.config.arch), fmt::join(extra, ", "));
  return state;
}

}  // namespace ndt
