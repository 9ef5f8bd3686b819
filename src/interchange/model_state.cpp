#include "interchange/model_state.h"

#include <algorithm>

#include "core/error.h"

#include <fmt/ranges.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <set>

namespace ndt {

void check_model_state(const ModelState& state) {
  std::set<std::string> expected;
  for (const ParameterSpec& spec : model_parameter_specs(state.config)) {
    expected.insert(spec.name);
    auto it = state.tensors.find(spec.name);
    NDT_CHECK(it != state.tensors.end(), "model state lacks tensor {} {}", spec.name,
              shape_str(spec.logical_shape));
    const auto numel = static_cast<size_t>(shape_numel(spec.logical_shape));
    NDT_CHECK(it->second.size() == numel, "model state tensor {} holds {} values, expected {} for shape {}",
              spec.name, it->second.size(), numel, shape_str(spec.logical_shape));
  }
  std::vector<std::string> extra;
  for (const auto& [name, data] : state.tensors) {
    if (!expected.count(name)) extra.push_back(name);
  }
  NDT_CHECK(extra.empty(), "model state has tensors that are not parameters of its config: {}",
            fmt::join(extra, ", "));
}

std::map<std::string, std::string> config_fields(const ModelConfig& c) {
  auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  return {{"arch", std::string(arch_name(c.arch))},
          {"vocab_size", std::to_string(c.vocab_size)},
          {"max_seq_len", std::to_string(c.max_seq_len)},
          {"n_layer", std::to_string(c.n_layer)},
          {"n_head", std::to_string(c.n_head)},
          {"n_kv_head", std::to_string(c.n_kv_head)},
          {"d_model", std::to_string(c.d_model)},
          {"d_ff", std::to_string(c.d_ff)},
          {"qk_norm", flag(c.qk_norm)},
          {"tied_embeddings", flag(c.tied_embeddings)},
          {"norm_eps", fmt::format("{}", c.norm_eps)},
          {"rope_theta", fmt::format("{}", c.rope_theta)}};
}

std::string config_differences(const std::map<std::string, std::string>& theirs, const ModelConfig& ours,
                               std::string_view where, const std::vector<std::string>& ignored) {
  std::string differences;
  for (const auto& [key, value] : config_fields(ours)) {
    if (std::find(ignored.begin(), ignored.end(), key) != ignored.end()) continue;
    const auto it = theirs.find(key);
    const std::string other = it == theirs.end() ? "(missing)" : it->second;
    if (other != value) differences += fmt::format("; model.{} = {} {}, {} in this run", key, other, where, value);
  }
  return differences;
}

ModelConfig config_from_fields(const std::map<std::string, std::string>& fields, const std::string& source) {
  auto get = [&](const char* key) -> const std::string& {
    auto it = fields.find(key);
    NDT_CHECK(it != fields.end(), "{}: model config lacks field {}", source, key);
    return it->second;
  };
  auto bad = [&](const char* key) {
    fail("{}: model config field {} = \"{}\" does not parse", source, key, get(key));
  };
  auto integer = [&](const char* key) {
    const std::string& s = get(key);
    int v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size()) bad(key);
    return v;
  };
  auto real = [&](const char* key) {
    const std::string& s = get(key);
    char* end = nullptr;
    float v = std::strtof(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size()) bad(key);
    return v;
  };
  auto flag = [&](const char* key) {
    if (get(key) != "true" && get(key) != "false") bad(key);
    return get(key) == "true";
  };
  ModelConfig c;
  c.arch = arch_from_name(get("arch"));
  c.vocab_size = integer("vocab_size");
  c.max_seq_len = integer("max_seq_len");
  c.n_layer = integer("n_layer");
  c.n_head = integer("n_head");
  c.n_kv_head = integer("n_kv_head");
  c.d_model = integer("d_model");
  c.d_ff = integer("d_ff");
  c.qk_norm = flag("qk_norm");
  c.tied_embeddings = flag("tied_embeddings");
  c.norm_eps = real("norm_eps");
  c.rope_theta = real("rope_theta");
  try {
    c.validate();
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  return c;
}

namespace {

// Throws unless the model holds each parameter whole in its value arena.
void check_whole(const Parameter& p) {
  NDT_CHECK(p.value.defined() && p.local_shape == p.spec.logical_shape,
            "parameter {} is not held whole (local block {} of {}): interchange needs a model "
            "built on one rank with materialized parameters",
            p.name(), shape_str(p.local_shape), shape_str(p.spec.logical_shape));
}

}  // namespace

void load_into(Transformer& model, const ModelState& state) {
  const auto want = config_fields(model.config()), have = config_fields(state.config);
  for (const auto& [key, value] : want) {
    NDT_CHECK(have.at(key) == value, "model state has model.{} = {} but the Transformer has {}", key,
              have.at(key), value);
  }
  check_model_state(state);
  for (Parameter& p : model.store().params()) {
    check_whole(p);
    const std::vector<float>& src = state.tensors.at(p.name());
    std::memcpy(p.data(), src.data(), src.size() * sizeof(float));
  }
}

ModelState state_of(const Transformer& model) {
  ModelState state{model.config(), {}};
  for (const Parameter& p : model.store().params()) {
    check_whole(p);
    state.tensors[p.name()].assign(p.data(), p.data() + p.numel());
  }
  return state;
}

}  // namespace ndt
