// Shared by the interchange tests: a model whose every parameter (norms and biases
// too) holds distinct non-trivial values, its loss on fixed tokens, bit-exact state
// comparison, a state rounded to a low-precision dtype, a safetensors file's header.
#pragma once

#include "../common/temp_dir.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "interchange/model_state.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace ndt::testing {

inline ModelConfig llama_qk_norm() {
  ModelConfig c = ModelConfig::preset("llama-tiny");
  c.qk_norm = true;
  return c;
}

// The Transformer's initial parameters plus noise, so that no tensor is all ones or zeros.
inline ModelState perturbed_state(const ModelConfig& config, uint64_t seed = 7) {
  Transformer model(config, seed);
  ModelState state = state_of(model);
  for (auto& [name, values] : state.tensors) {
    for (size_t i = 0; i < values.size(); ++i) values[i] += 0.05f * normal_at(seed, hash_name(name), i);
  }
  return state;
}

inline double loss_of(Transformer& model) {
  const int B = 2, T = 16, V = model.config().vocab_size;
  std::vector<int32_t> inputs(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    inputs[i] = static_cast<int32_t>(philox(3, 1, i)[0] % V);
    targets[i] = static_cast<int32_t>(philox(3, 2, i)[0] % V);
  }
  return model.evaluate(inputs.data(), targets.data(), B, T);
}

inline double loss_of(const ModelState& state, uint64_t seed) {
  Transformer model(state.config, seed);
  load_into(model, state);
  return loss_of(model);
}

inline void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(config_fields(a), config_fields(b));
}

inline void expect_same_state(const ModelState& a, const ModelState& b) {
  expect_same_config(a.config, b.config);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, values] : a.tensors) {
    ASSERT_TRUE(b.tensors.count(name)) << name;
    const std::vector<float>& other = b.tensors.at(name);
    ASSERT_EQ(values.size(), other.size()) << name;
    EXPECT_EQ(std::memcmp(values.data(), other.data(), values.size() * sizeof(float)), 0) << name;
  }
}

// `state` with every value rounded to `dtype` (nearest even) and widened back to f32:
// what a file storing that dtype holds.
inline ModelState rounded_to(ModelState state, DType dtype) {
  for (auto& [name, values] : state.tensors) {
    std::vector<char> stored(values.size() * dtype_size(dtype));
    convert(values.data(), DType::f32, stored.data(), dtype, values.size());
    convert(stored.data(), dtype, values.data(), DType::f32, values.size());
  }
  return state;
}

// The JSON header of the safetensors file at `path`.
inline nlohmann::json safetensors_header(const std::string& path) {
  const std::string bytes = read_bytes(path);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);
  return nlohmann::json::parse(bytes.substr(8, header_bytes));
}

// The dtype strings of a safetensors header's tensors (all but __metadata__), each once.
inline std::set<std::string> safetensors_dtypes(const std::string& path) {
  const nlohmann::json header = safetensors_header(path);
  std::set<std::string> dtypes;
  for (const auto& [name, entry] : header.items()) {
    if (name != "__metadata__") dtypes.insert(entry.at("dtype").get<std::string>());
  }
  return dtypes;
}

}  // namespace ndt::testing
