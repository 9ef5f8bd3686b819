// Saved models reused by a run (issue 35, class 1): a resume or a train.init_from compares
// every field of the model's description the file carries and names each difference
// (MoE keys forgotten, top-k or the router score changed), accepts what does not change
// the model (gpt2's n_kv_head: a model's own llm.c export; the MoE loss coefficients for
// a new run), and starts from exactly the saved MoE weights.
#include "../common/one_rank_mesh.h"
#include "../mpi/parity.h"
#include "interchange/hf_names.h"
#include "interchange/llmc.h"
#include "test_support.h"
#include "train/model_checkpoint.h"
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <string>

namespace ndt {
namespace {

class SavedModelReuse : public ::testing::Test {
 protected:
  SavedModelReuse() { write_shard(dir_.file("train.bin"), testing::synthetic_text(20000, 7)); }
  RunConfig moe() const {
    RunConfig c = testing::moe_run(dir_.file("train.bin"), /*llama=*/false);
    c.steps = 2;
    c.checkpoint_dir = dir_.file("ckpt");
    c.checkpoint_async = false;
    return c;
  }
  std::string error_of(const RunConfig& c) const { return testing::trainer_error(c); }
  testing::TempDir dir_;
};

// Catches: a resume that forgets the MoE keys failing as "unknown tensor" instead of
// naming model.n_experts, and one that changes the routing accepted silently.
TEST_F(SavedModelReuse, ResumeNamesEveryMoeFieldThatDiffers) {
  {
    Trainer trainer(moe(), testing::one_rank_mesh(), nullptr);
    trainer.run();
  }
  RunConfig resume = moe();
  resume.resume = "latest";
  resume.steps = 3;
  EXPECT_EQ(error_of(resume), "");
  RunConfig dense = resume;
  dense.model.n_experts = 0;
  EXPECT_MENTIONS(error_of(dense), "does not match the model; model.n_experts = 4 in the checkpoint, 0 in this run");
  RunConfig top1 = resume;
  top1.model.moe_top_k = 1;
  EXPECT_MENTIONS(error_of(top1), "model.moe_top_k = 2 in the checkpoint, 1 in this run");
  RunConfig sigmoid = resume;
  sigmoid.model.moe_score = MoeScore::sigmoid;
  sigmoid.model.moe_aux_loss = 0.05f;
  EXPECT_MENTIONS(error_of(sigmoid), "model.moe_score = softmax in the checkpoint, sigmoid in this run");
  EXPECT_MENTIONS(error_of(sigmoid), "model.moe_aux_loss = 0.01 in the checkpoint, 0.05 in this run");
}

// Catches: init_from rebuilding a dense model from an MoE file (or another MoE model),
// refusing a new run's own loss coefficients, or refusing a gpt2 model's own llm.c export
// over n_kv_head, a key GPT-2 does not use.
TEST_F(SavedModelReuse, InitFromComparesWhatShapesTheModelAndStartsFromItsWeights) {
  RunConfig c = moe();
  Transformer source(c.model, /*seed=*/99);
  const ModelState weights = state_of(source);
  save_safetensors_hf(weights, dir_.file("moe.safetensors"));
  c.init_from = dir_.file("moe.safetensors");
  c.model.moe_aux_loss = 0.05f;  // a new run's objective: allowed
  {
    Trainer trainer(c, testing::one_rank_mesh(), nullptr);
    const std::vector<float> expected(source.store().values().data<float>(),
                                      source.store().values().data<float>() + source.store().numel());
    EXPECT_EQ(trainer.full_parameters(), expected);
  }
  RunConfig top1 = c;
  top1.model.moe_top_k = 1;
  EXPECT_MENTIONS(error_of(top1), "does not match the model; model.moe_top_k = 2 there, 1 in this run");

  RunConfig gpt2 = testing::tiny_run(dir_.file("train.bin"), 4, 0);
  gpt2.model.n_head = 2;  // n_kv_head stays 4: gpt2 does not use it
  save_llmc(state_of(Transformer(gpt2.model, 5)), dir_.file("own.bin"));
  gpt2.init_from = dir_.file("own.bin");
  EXPECT_EQ(error_of(gpt2), "");
}

}  // namespace
}  // namespace ndt
