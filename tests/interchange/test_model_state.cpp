// ModelState checks: missing, wrong-sized and extra tensors, a Transformer built from
// another config, and a Transformer without whole parameters.
#include "../common/errors.h"
#include "interchange/hf_names.h"
#include "support.h"

#include <gtest/gtest.h>

namespace ndt {
namespace {

using testing::expect_error;

TEST(ModelState, ChecksTensorsAndConfig) {
  const ModelConfig config = ModelConfig::preset("gpt2-tiny");
  ModelState state = testing::perturbed_state(config);
  Transformer model(config, 1);

  ModelState missing = state;
  missing.tensors.erase("blocks.2.ln2.bias");
  expect_error([&] { load_into(model, missing); }, {"lacks tensor blocks.2.ln2.bias [128]"});
  ModelState short_tensor = state;
  short_tensor.tensors["wpe.weight"].pop_back();
  expect_error([&] { check_model_state(short_tensor); },
               {"wpe.weight holds 32767 values, expected 32768", "[256, 128]"});
  ModelState extra = state;
  extra.tensors["lm_head.weight"] = {};
  expect_error([&] { save_safetensors_hf(extra, "/nonexistent"); }, {"not parameters", "lm_head.weight"});
  ModelState other_eps = state;
  other_eps.config.norm_eps = 1e-6f;
  expect_error([&] { load_into(model, other_eps); }, {"model.norm_eps = 1e-06 in the state, 1e-05 in the Transformer"});

  Transformer unmaterialized(config, 1, 256, /*materialize_parameters=*/false);
  expect_error([&] { state_of(unmaterialized); }, {"wte.weight", "not held whole", "one rank"});
}

}  // namespace
}  // namespace ndt
