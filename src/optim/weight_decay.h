// Which parameters AdamW decays (optim.weight_decay_policy). The model declares its
// linear weight matrices as decayed when it makes the parameter specs
// (ParameterSpec::weight_decay); a policy keeps that or widens it:
//   matrices                 linear weight matrices only (attention and MLP
//                            projections, an untied output layer); not embeddings,
//                            norms or biases. The default.
//   matrices_and_embeddings  every parameter of 2 or more dimensions: also the token
//                            and position embeddings (so a tied output layer). As
//                            nanoGPT and llm.c's CUDA trainer.
//   all                      every parameter. As llm.c's CPU trainer.
#pragma once

#include "model/parameter.h"

#include <string>
#include <string_view>
#include <vector>

namespace ndt {

enum class WeightDecayPolicy { matrices, matrices_and_embeddings, all };

std::string_view weight_decay_policy_name(WeightDecayPolicy policy);
// Throws ndt::Error naming optim.weight_decay_policy, the value and the choices.
WeightDecayPolicy weight_decay_policy_from_name(std::string_view name);
std::vector<std::string> weight_decay_policy_names();

// Sets spec.weight_decay of every parameter of a freshly built store (before
// parallelize(): the layouts and AdamW read the flag from the specs).
void apply_weight_decay_policy(ParameterStore& store, WeightDecayPolicy policy);

}  // namespace ndt
