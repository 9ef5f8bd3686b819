#include "interchange/hf_names.h"

#include "core/error.h"
#include "interchange/safetensors.h"
#include "interchange/stored_values.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <set>

namespace ndt {

namespace {

// One Hugging Face tensor: the ndtrain tensors it holds, concatenated along dim 0
// (GPT-2's c_attn is q|k|v), and whether it is stored transposed ([in, out], Conv1D);
// or, with slice >= 0, the slice-th entry along dim 0 of one ndtrain tensor (an expert
// of an MoE block's [E, F, C] weights is a tensor of its own in Hugging Face's files).
struct HfTensor {
  std::string name;
  std::vector<std::string> parts;
  bool transposed = false;
  int slice = -1;
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
        if (c.mlp_d_ff(l) > 0) {  // the dense MLP (in an MoE block: the shared one)
          add(h + "mlp.c_fc." + s, {b + "mlp.fc." + s}, w);
          add(h + "mlp.c_proj." + s, {b + "mlp.proj." + s}, w);
        }
      }
      if (c.is_moe_block(l)) {  // no transformers counterpart: ndtrain's names and layout
        for (const std::string x : {"router", "experts.fc", "experts.proj"}) add(h + "moe." + x + ".weight", {b + "moe." + x + ".weight"});
      }
    } else {
      add(h + "input_layernorm.weight", {b + "ln1.weight"});
      for (const std::string x : {"q", "k", "v", "o"}) {
        add(attn + x + "_proj.weight", {b + "attn.w" + x + ".weight"});
        if (c.qkv_bias && x != "o") add(attn + x + "_proj.bias", {b + "attn.w" + x + ".bias"});
      }
      add(h + "post_attention_layernorm.weight", {b + "ln2.weight"});
      // Qwen2/Qwen3-MoE: the router is mlp.gate, each expert mlp.experts.{e}, the shared
      // MLP of an MoE block mlp.shared_expert (Qwen2-MoE's name).
      const std::string dense = c.is_moe_block(l) ? h + "mlp.shared_expert." : h + "mlp.";
      if (c.mlp_d_ff(l) > 0) {
        for (const std::string x : {"gate", "up", "down"}) add(dense + x + "_proj.weight", {b + "mlp." + x + ".weight"});
      }
      if (c.is_moe_block(l)) {
        add(h + "mlp.gate.weight", {b + "moe.router.weight"});
        for (int e = 0; e < c.n_experts; ++e) {
          for (const std::string x : {"gate", "up", "down"}) {
            out.push_back({h + "mlp.experts." + std::to_string(e) + "." + x + "_proj.weight",
                           {b + "moe.experts." + x + ".weight"}, false, e});
          }
        }
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

}  // namespace

std::vector<HfLinear> hf_linears(const ModelConfig& config) {
  std::vector<HfLinear> out;
  const std::string suffix = ".weight";
  for (const HfTensor& t : hf_tensors(config, "transformer.")) {
    const std::string& first = t.parts[0];
    const bool block_linear = first.rfind("blocks.", 0) == 0 && first.find(".attn.w") != std::string::npos;
    const bool mlp_linear = first.rfind("blocks.", 0) == 0 && first.find(".mlp.") != std::string::npos;
    if (t.slice >= 0 || !(block_linear || mlp_linear) || first.size() < suffix.size() ||
        first.compare(first.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    out.push_back({t.name.substr(0, t.name.size() - suffix.size()), t.parts, t.transposed});
  }
  return out;
}

namespace {

std::map<std::string, Shape> spec_shapes(const ModelConfig& c) {
  std::map<std::string, Shape> shapes;
  for (const ParameterSpec& s : model_parameter_specs(c)) shapes[s.name] = s.logical_shape;
  return shapes;
}

// Shape of the parts concatenated along dim 0, in ndtrain's [out, in] layout (a slice:
// the part's shape without dim 0).
Shape fused_shape(const HfTensor& t, const std::map<std::string, Shape>& shapes) {
  Shape shape = shapes.at(t.parts[0]);
  if (t.slice >= 0) return Shape(shape.begin() + 1, shape.end());
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
    if (t.slice < 0) {
      fused.insert(fused.end(), v.begin(), v.end());
    } else {
      const auto n = static_cast<ptrdiff_t>(shape_numel(shape));
      fused.assign(v.begin() + t.slice * n, v.begin() + (t.slice + 1) * n);
    }
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
  if (t.slice >= 0) {  // one entry of the whole tensor, which the other slices fill
    std::vector<float>& whole = state.tensors[t.parts[0]];
    whole.resize(static_cast<size_t>(shape_numel(shapes.at(t.parts[0]))));
    std::copy(data.begin(), data.end(), whole.begin() + static_cast<ptrdiff_t>(t.slice * data.size()));
    return;
  }
  size_t at = 0;
  for (const std::string& p : t.parts) {
    const auto n = static_cast<size_t>(shape_numel(shapes.at(p)));
    state.tensors[p].assign(data.begin() + at, data.begin() + at + n);
    at += n;
  }
}

// Reads shapes of the tensors of a file without ndtrain metadata, naming the file.
struct ShapeReader {
  const std::map<std::string, SafetensorsTensor>& tensors;
  const std::string& path;
  bool has(const std::string& name) const { return tensors.count(name) > 0; }
  int dim(const std::string& name, int d, size_t rank = 2) const {
    auto it = tensors.find(name);
    NDT_CHECK(it != tensors.end(), "safetensors {}: missing tensor {}", path, name);
    NDT_CHECK(it->second.shape.size() == rank, "safetensors {}: tensor {} has shape {}, expected {} dims", path, name,
              shape_str(it->second.shape), rank);
    return static_cast<int>(it->second.shape[static_cast<size_t>(d)]);
  }
};

// The MoE fields shapes tell (n_experts, moe_every, the experts' and the shared MLP's
// widths, d_ff), for layers whose routers are named router(l); the routing fields
// (top-k, score, normalisation, capacity, loss coefficients) stay the hint's and are
// added to `assumed`. `dense_width(l)` is the width of layer l's dense MLP (0: none).
void infer_moe(ModelConfig& c, const ShapeReader& r, const std::function<std::string(int)>& router,
               const std::function<int(int)>& expert_width, const std::function<int(int)>& dense_width,
               std::set<std::string>& assumed) {
  int first = -1;
  for (int l = 0; l < c.n_layer && first < 0; ++l) {
    if (r.has(router(l))) first = l;
  }
  c.n_experts = 0;
  if (first < 0) {
    c.d_ff = dense_width(0);
    return;
  }
  c.n_experts = r.dim(router(first), 0);
  c.moe_every = first + 1;
  for (int l = 0; l < c.n_layer; ++l) {
    NDT_CHECK(r.has(router(l)) == c.is_moe_block(l),
              "safetensors {}: layer {} {} a router ({}), but the first MoE layer {} makes every {}-th layer an MoE "
              "layer: ndtrain's model.moe_every cannot express this layout",
              r.path, l, r.has(router(l)) ? "has" : "has no", router(l), first, c.moe_every);
  }
  c.moe_d_ff = expert_width(first);
  c.moe_shared_d_ff = dense_width(first);
  c.d_ff = c.moe_every > 1 ? dense_width(0) : c.moe_d_ff;
  for (const char* key : {"moe_top_k", "moe_score", "moe_normalize_top_k", "moe_capacity_factor", "moe_aux_loss",
                          "moe_z_loss"}) {
    assumed.insert(key);
  }
}

// The config from the tensor shapes, with what shapes cannot tell taken from the hint
// (those fields are added to `assumed`).
ModelConfig infer_config(const std::map<std::string, SafetensorsTensor>& tensors, const std::string& t,
                         const std::optional<ModelConfig>& hint, const std::string& path, std::set<std::string>& assumed) {
  const ShapeReader r{tensors, path};
  const bool gpt2 = r.has(t + "wte.weight");
  NDT_CHECK(gpt2 || r.has("model.embed_tokens.weight"),
            "safetensors {}: found neither transformer.wte.weight (GPT-2) nor model.embed_tokens.weight "
            "(Llama): cannot tell the architecture",
            path);
  NDT_CHECK(hint.has_value(),
            "safetensors {} has no ndtrain config metadata and no config hint was given: n_head cannot "
            "be inferred from tensor shapes (the hint supplies n_head, norm_eps, rope_theta{})",
            path, gpt2 ? "" : ", max_seq_len");
  auto count_layers = [&](const std::string& prefix, const std::string& suffix) {
    int n = 0;
    while (r.has(prefix + std::to_string(n) + suffix)) ++n;
    return n;
  };
  ModelConfig c = *hint;
  assumed = {"n_head", "norm_eps"};
  const std::string h = gpt2 ? t + "h." : "model.layers.";
  auto layer = [&](int l) { return h + std::to_string(l) + "."; };
  c.arch = gpt2 ? Arch::gpt2 : Arch::llama;
  c.vocab_size = r.dim(gpt2 ? t + "wte.weight" : "model.embed_tokens.weight", 0);
  c.d_model = r.dim(gpt2 ? t + "wte.weight" : "model.embed_tokens.weight", 1);
  c.n_layer = count_layers(h, gpt2 ? ".ln_1.weight" : ".input_layernorm.weight");
  if (gpt2) {
    c.max_seq_len = r.dim(t + "wpe.weight", 0);
    c.n_kv_head = c.n_head;
    c.qk_norm = r.has(t + "h.0.attn.q_norm.weight");
    c.tied_embeddings = true;
    infer_moe(c, r, [&](int l) { return layer(l) + "moe.router.weight"; },
              [&](int l) { return r.dim(layer(l) + "moe.experts.fc.weight", 1, 3); },
              [&](int l) { return r.has(layer(l) + "mlp.c_fc.weight") ? r.dim(layer(l) + "mlp.c_fc.weight", 1) : 0; },
              assumed);
  } else {
    assumed.insert({"rope_theta", "max_seq_len", "rope_scaling", "rope_scaling_factor", "rope_low_freq_factor",
                    "rope_high_freq_factor", "rope_original_max_seq_len"});
    const int head_dim = c.n_head > 0 ? c.d_model / c.n_head : 0;
    c.n_kv_head = head_dim > 0 ? r.dim("model.layers.0.self_attn.k_proj.weight", 0) / head_dim : 0;
    c.qk_norm = r.has("model.layers.0.self_attn.q_norm.weight");
    c.qkv_bias = r.has("model.layers.0.self_attn.q_proj.bias");
    c.tied_embeddings = !r.has("lm_head.weight");
    infer_moe(c, r, [&](int l) { return layer(l) + "mlp.gate.weight"; },
              [&](int l) { return r.dim(layer(l) + "mlp.experts.0.gate_proj.weight", 0); },
              [&](int l) {
                const std::string dense = layer(l) + (r.has(layer(l) + "mlp.gate.weight") ? "mlp.shared_expert." : "mlp.");
                return r.has(dense + "gate_proj.weight") ? r.dim(dense + "gate_proj.weight", 0) : 0;
              },
              assumed);
  }
  try {
    c.validate();
  } catch (const Error& e) {
    fail("safetensors {}: the config inferred from tensor shapes is invalid: {}", path, e.what());
  }
  return c;
}

}  // namespace

std::map<std::string, HfPlace> hf_places(const ModelConfig& config, const std::string& gpt2_prefix) {
  NDT_CHECK(!config.is_moe(), "model.n_experts = {}: Hugging Face model folders are read and written for dense "
            "models only", config.n_experts);
  const auto shapes = spec_shapes(config);
  std::map<std::string, HfPlace> places;
  for (const HfTensor& t : hf_tensors(config, gpt2_prefix)) {
    int64_t row = 0;
    for (const std::string& p : t.parts) {
      places[p] = {t.name, row, t.transposed};
      row += shapes.at(p)[0];
    }
  }
  return places;
}

std::map<std::string, Shape> hf_file_shapes(const ModelConfig& config, const std::string& gpt2_prefix) {
  const auto shapes = spec_shapes(config);
  std::map<std::string, Shape> out;
  for (const HfTensor& t : hf_tensors(config, gpt2_prefix)) {
    const Shape fused = fused_shape(t, shapes);
    out[t.name] = t.transposed ? Shape{fused[1], fused[0]} : fused;
  }
  return out;
}

std::map<std::string, SafetensorsTensor> hf_tensors_of(const ModelState& state) {
  check_model_state(state);
  const auto shapes = spec_shapes(state.config);
  std::map<std::string, SafetensorsTensor> out;
  for (const HfTensor& t : hf_tensors(state.config, "transformer.")) out[t.name] = to_hf(t, state, shapes);
  return out;
}

void save_safetensors_hf(const ModelState& state, const std::string& path, DType dtype) {
  check_model_state(state);
  for (const auto& [name, values] : state.tensors) check_storable(path, name, values, dtype);
  SafetensorsFile file;
  file.metadata = config_fields(state.config);
  file.metadata["format"] = "pt";  // transformers refuses safetensors without it
  file.tensors = hf_tensors_of(state);
  write_safetensors(path, file, dtype);
}

ModelState load_safetensors_hf(const std::string& path, std::optional<ModelConfig> config_hint) {
  SafetensorsFile file = read_safetensors(path);
  const std::string prefix =
      file.tensors.count("wte.weight") && !file.tensors.count("transformer.wte.weight") ? "" : "transformer.";
  bool has_metadata = false;
  for (const auto& [key, value] : config_fields(ModelConfig{})) has_metadata |= file.metadata.count(key) > 0;
  ModelState state;
  state.config = has_metadata ? config_from_fields(file.metadata, "safetensors " + path + " metadata")
                              : infer_config(file.tensors, prefix, config_hint, path, state.assumed);

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
