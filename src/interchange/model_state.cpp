#include "interchange/model_state.h"

#include <algorithm>

#include "core/error.h"

#include <fmt/ranges.h>

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
  NDT_CHECK(config_fields(model.config()) == config_fields(state.config),
            "model state does not describe the Transformer's model{}",
            config_differences(state.config, model.config(), "in the state", {}, "in the Transformer"));
  check_model_state(state);
  for (Parameter& p : model.store().params()) {
    check_whole(p);
    const std::vector<float>& src = state.tensors.at(p.name());
    std::memcpy(p.data(), src.data(), src.size() * sizeof(float));
  }
}

ModelState state_of(const Transformer& model) {
  ModelState state{model.config(), {}, {}};
  for (const Parameter& p : model.store().params()) {
    check_whole(p);
    state.tensors[p.name()].assign(p.data(), p.data() + p.numel());
  }
  return state;
}

}  // namespace ndt
