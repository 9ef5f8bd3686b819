// ModelState: every parameter of a model as one whole (logical) tensor under its
// ndtrain name, plus the config that defines those names and shapes. It is the meeting
// point of the interchange formats (safetensors/Hugging Face, llm.c) and the
// Transformer: formats convert to and from it, load_into/state_of move it in and out
// of a model built on one rank.
#pragma once

#include "interchange/model_description.h"
#include "model/config.h"
#include "model/transformer.h"

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace ndt {

struct ModelState {
  ModelConfig config;
  std::map<std::string, std::vector<float>> tensors;  // name -> row-major f32 data of spec.logical_shape
  // Fields of config_fields(config) the source did not carry (a safetensors file without
  // ndtrain metadata: n_head, norm_eps, ... came from a hint or the defaults). Readers
  // that compare the model with another (train.init_from) skip them.
  std::set<std::string> assumed;
};

// Throws ndt::Error naming the first parameter of model_parameter_specs(state.config)
// that is missing or has the wrong number of values, or every tensor that is not one.
void check_model_state(const ModelState& state);

// Copies every tensor into the model's parameter values. The model must have been
// built from state.config (same fields) with whole parameters (one rank, materialized).
void load_into(Transformer& model, const ModelState& state);
// The model's parameters as whole tensors (same conditions).
ModelState state_of(const Transformer& model);

}  // namespace ndt
