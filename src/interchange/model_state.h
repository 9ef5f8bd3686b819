// ModelState: every parameter of a model as one whole (logical) tensor under its
// ndtrain name, plus the config that defines those names and shapes. It is the meeting
// point of the interchange formats (safetensors/Hugging Face, llm.c) and the
// Transformer: formats convert to and from it, load_into/state_of move it in and out
// of a model built on one rank.
#pragma once

#include "model/config.h"
#include "model/transformer.h"

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ndt {

struct ModelState {
  ModelConfig config;
  std::map<std::string, std::vector<float>> tensors;  // name -> row-major f32 data of spec.logical_shape
};

// Throws ndt::Error naming the first parameter of model_parameter_specs(state.config)
// that is missing or has the wrong number of values, or every tensor that is not one.
void check_model_state(const ModelState& state);

// The ModelConfig fields that define a model (all but init_std) as strings, keyed by
// field name ("arch", "vocab_size", ..., "rope_theta"); floats in shortest round-trip form.
std::map<std::string, std::string> config_fields(const ModelConfig& config);
// "; model.KEY = THEIRS <where>, OURS in this run" for every field of `ours` whose
// value in `theirs` (config_fields of a saved model) differs or is missing, skipping
// `ignored`; empty when they agree.
std::string config_differences(const std::map<std::string, std::string>& theirs, const ModelConfig& ours,
                               std::string_view where, const std::vector<std::string>& ignored = {});
// The inverse; throws naming `source`, the missing key or the value that does not parse.
ModelConfig config_from_fields(const std::map<std::string, std::string>& fields, const std::string& source);

// Copies every tensor into the model's parameter values. The model must have been
// built from state.config (same fields) with whole parameters (one rank, materialized).
void load_into(Transformer& model, const ModelState& state);
// The model's parameters as whole tensors (same conditions).
ModelState state_of(const Transformer& model);

}  // namespace ndt
