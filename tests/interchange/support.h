// Shared by the interchange tests: a model whose every parameter (norms and biases
// too) holds distinct non-trivial values, its loss on fixed tokens, bit-exact state
// comparison.
#pragma once

#include "core/rng.h"
#include "interchange/model_state.h"

#include <gtest/gtest.h>

#include <cstring>
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

}  // namespace ndt::testing
