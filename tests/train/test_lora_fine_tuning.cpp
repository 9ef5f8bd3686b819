// Fine-tuning with LoRA (docs/fine_tuning.md) from a base model's weights: init_from
// loads the base weights and keeps the adapters' start (which the file lacks), training
// moves the adapters alone (the frozen weights get no update and no weight decay), and
// a run that changes the adapters' settings does not resume the checkpoint.
#include "../common/one_rank_mesh.h"
#include "../mpi/parity.h"
#include "interchange/hf_names.h"
#include "test_support.h"
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ndt {
namespace {

// Catches: init_from refusing a base model for lacking the adapters, or overwriting
// their start; frozen weights moved by AdamW's weight decay (their gradient is zero);
// adapters that do not train.
TEST(LoraFineTuning, StartsFromTheBaseWeightsAndTrainsTheAdaptersAlone) {
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(20000, 7));
  RunConfig c = testing::tiny_run(dir.file("train.bin"), 4, 0);
  c.steps = 3;
  c.adamw.weight_decay = 0.1f;
  const Transformer base(c.model, /*seed=*/99);
  save_safetensors_hf(state_of(base), dir.file("base.safetensors"));
  c.init_from = dir.file("base.safetensors");
  c.model.lora.targets = {"wq", "wv", "mlp.*"};
  c.model.lora.rank = 4;
  const Transformer fresh(c.model, c.seed);  // the adapters' start
  Trainer trainer(c, testing::one_rank_mesh(), nullptr);
  auto check = [&](bool trained) {
    const std::vector<float> params = trainer.full_parameters();
    size_t at = 0;
    for (const ParameterSpec& spec : model_parameter_specs(c.model)) {
      const auto n = static_cast<size_t>(shape_numel(spec.logical_shape));
      const std::vector<float> got(params.begin() + static_cast<ptrdiff_t>(at),
                                   params.begin() + static_cast<ptrdiff_t>(at + n));
      at += n;
      const Parameter& want = spec.frozen ? base.store().get(spec.name) : fresh.store().get(spec.name);
      const std::vector<float> start(want.data(), want.data() + n);
      if (spec.frozen || !trained) {
        EXPECT_EQ(got, start) << spec.name << (trained ? " moved" : " did not start where it should");
      } else {
        EXPECT_NE(got, start) << spec.name << " did not train";
      }
    }
  };
  check(false);
  for (int s = 0; s < c.steps; ++s) trainer.step();
  check(true);
}

}  // namespace
}  // namespace ndt
