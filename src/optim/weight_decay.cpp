#include "optim/weight_decay.h"

#include "core/error.h"

#include <fmt/ranges.h>

namespace ndt {

namespace {

constexpr WeightDecayPolicy kPolicies[] = {WeightDecayPolicy::matrices, WeightDecayPolicy::matrices_and_embeddings,
                                           WeightDecayPolicy::all};

}  // namespace

std::string_view weight_decay_policy_name(WeightDecayPolicy policy) {
  switch (policy) {
    case WeightDecayPolicy::matrices: return "matrices";
    case WeightDecayPolicy::matrices_and_embeddings: return "matrices_and_embeddings";
    case WeightDecayPolicy::all: return "all";
  }
  return "";
}

std::vector<std::string> weight_decay_policy_names() {
  std::vector<std::string> names;
  for (WeightDecayPolicy p : kPolicies) names.emplace_back(weight_decay_policy_name(p));
  return names;
}

WeightDecayPolicy weight_decay_policy_from_name(std::string_view name) {
  for (WeightDecayPolicy p : kPolicies) {
    if (weight_decay_policy_name(p) == name) return p;
  }
  fail("optim.weight_decay_policy = \"{}\" is not a known policy ({})", name,
       fmt::join(weight_decay_policy_names(), ", "));
}

void apply_weight_decay_policy(ParameterStore& store, WeightDecayPolicy policy) {
  for (Parameter& p : store.params()) {
    switch (policy) {
      case WeightDecayPolicy::matrices: break;  // as the model declared
      case WeightDecayPolicy::matrices_and_embeddings:
        p.spec.weight_decay = p.spec.weight_decay || p.spec.logical_shape.size() >= 2;
        break;
      case WeightDecayPolicy::all: p.spec.weight_decay = true; break;
    }
    // A frozen parameter (fine-tuning) is never updated, so never decayed either: with
    // its gradient zero, AdamW's step on it is then exactly zero.
    if (!p.trainable()) p.spec.weight_decay = false;
  }
}

}  // namespace ndt
