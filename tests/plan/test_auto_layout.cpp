// parallel.layout = "auto" (plan/auto_layout.h) without MPI: the choice is the planner's
// fastest fitting layout, the settings the config gives stay fixed, nothing fitting
// names the closest layout and its overflow, and what the search cannot keep is refused
// by name. The multi-rank runs (parity, every rank's choice) are in tests/mpi.
#include "../common/errors.h"
#include "../common/temp_dir.h"
#include "plan/auto_layout.h"

#include <gtest/gtest.h>

#include <fstream>

namespace ndt {
namespace {

RunConfig tiny_llama() {
  RunConfig c;
  c.model = ModelConfig::preset("llama-tiny");
  c.seq_len = 64, c.batch_size = 8;
  c.layout = LayoutMode::automatic;
  return c;
}

// Catches: a choice other than the planner's fastest fitting layout, or a config to train
// that does not have its settings (or still says auto).
TEST(AutoLayout, ChoosesThePlannersFastestFittingLayout) {
  const Cluster cluster = make_cluster(builtin_device("h100-sxm"), 1, 4, 0);
  const RunConfig c = tiny_llama();
  const AutoLayout choice = choose_auto_layout(c, {}, cluster);
  const PlanResult plan = plan_layouts(c, cluster);
  ASSERT_GT(plan.fitting, 1);
  EXPECT_EQ(choice.plan.candidates, plan.candidates);
  EXPECT_EQ(choice.best().layout.describe(), plan.layouts[0].layout.describe());
  EXPECT_EQ(choice.best().time.step_s, plan.layouts[0].time.step_s);
  ASSERT_NE(choice.runner_up(), nullptr);
  EXPECT_EQ(choice.runner_up()->layout.describe(), plan.layouts[1].layout.describe());
  EXPECT_EQ(Layout::of(choice.config).describe(), choice.best().layout.describe());
  EXPECT_EQ(choice.config.layout, LayoutMode::manual);
  EXPECT_NO_THROW(choice.config.validate_layout());
  EXPECT_EQ(choice.config.resolve_mesh(4).product(), 4);
  const LayoutPrediction p = choice.prediction(cluster);
  EXPECT_EQ(p.step_s, choice.best().time.step_s);
  EXPECT_EQ(p.memory_bytes, choice.best().memory.total());
  EXPECT_LE(p.memory_bytes, cluster.device.memory_bytes);
  const std::string text = describe_auto_layout(choice, cluster);
  for (const std::string& part : {std::string("chosen:    ") + p.layout, std::string("runner-up: ") + p.runner_up,
                                  std::string("predicted step"), std::string("MFU")}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
  }
}

// Catches: a setting the user gave overridden by the search (tp, ZeRO stage, micro-batch,
// recompute, sequence parallel), or kept settings not named.
TEST(AutoLayout, KeepsTheSettingsTheConfigGives) {
  const Cluster cluster = make_cluster(builtin_device("h100-sxm"), 1, 4, 0);
  RunConfig c = tiny_llama();
  c.mesh.tp = 2;
  const AutoLayout tp2 = choose_auto_layout(c, {"parallel.tp"}, cluster);
  EXPECT_EQ(tp2.fixed, "parallel.tp = 2");
  for (const LayoutScore& s : tp2.plan.layouts) EXPECT_EQ(s.layout.mesh.tp, 2) << s.layout.describe();
  EXPECT_EQ(tp2.config.mesh.tp, 2);
  // Given but at its default is still given: tp = 1 keeps tp out of the search.
  RunConfig one = tiny_llama();
  for (const LayoutScore& s : choose_auto_layout(one, {"parallel.tp"}, cluster).plan.layouts) EXPECT_EQ(s.layout.mesh.tp, 1);

  RunConfig many = tiny_llama();
  many.zero_stage = 3, many.micro_batch_size = 2, many.activation_checkpointing.mode = CheckpointMode::selective;
  many.mesh.tp = 2, many.sequence_parallel = true;
  const AutoLayout kept = choose_auto_layout(
      many, {"parallel.zero_stage", "train.micro_batch_size", "train.activation_checkpointing", "parallel.sequence_parallel"},
      cluster);
  EXPECT_EQ(kept.fixed,
            "parallel.zero_stage = 3, parallel.sequence_parallel = true, train.micro_batch_size = 2, "
            "train.activation_checkpointing = \"selective\"");
  ASSERT_GT(kept.plan.candidates, 0);
  for (const LayoutScore& s : kept.plan.layouts) {
    EXPECT_EQ(s.layout.zero_stage, 3);
    EXPECT_EQ(s.layout.micro_batch_size, 2);
    EXPECT_EQ(s.layout.recompute, CheckpointMode::selective);
    EXPECT_TRUE(s.layout.sequence_parallel);
    EXPECT_GT(s.layout.mesh.tp, 1);  // sequence parallel needs it; the tp size itself was not given
  }
}

// Catches: nothing fitting reported without the closest layout or what overflows.
TEST(AutoLayout, NothingFitsNamesTheClosestLayoutAndTheOverflow) {
  testing::TempDir dir;
  const std::string path = dir.file("small.toml");
  std::ofstream(path) << "name = \"small\"\nmemory_gib = 0.2\npeak_tflops_fp32 = 1\npeak_tflops_bf16 = 1\n"
                         "memory_bandwidth_gb_s = 10\nintra_node_gb_s = 5\ninter_node_gb_s = 5\ndevices_per_node = 4\n";
  const Cluster cluster = make_cluster(resolve_device(path), 1, 4, 0);
  RunConfig c = tiny_llama();
  c.model = ModelConfig::preset("llama-small");  // 125M parameters: 0.47 GiB of states per rank even under FSDP
  c.mesh.tp = 2;
  testing::expect_error([&] { choose_auto_layout(c, {"parallel.tp"}, cluster); },
                        {"parallel.layout = \"auto\": no layout of 4 small devices (204.8M each) fits in memory with "
                         "parallel.tp = 2 as the config gives them",
                         "the closest to fitting is ", "tp2", "out of memory", "GiB over the device's 0.20 GiB",
                         "the largest part"});
}

// Catches: parallel.layout_expert_load not reaching the search's cluster (an MoE model
// under ep priced as balanced whatever the config says).
TEST(AutoLayout, PricesTheConfigsExpertsLoad) {
  RunConfig c = tiny_llama();
  c.model = ModelConfig::preset("llama-moe-tiny");
  c.layout_device = "h100-sxm";
  c.mesh.ep = 2;
  const Cluster balanced = layout_cluster(c, 4, 4);
  EXPECT_EQ(balanced.expert_load, 1.0);
  c.layout_expert_load = 1.5f;
  const Cluster skewed = layout_cluster(c, 4, 4);
  EXPECT_EQ(skewed.expert_load, 1.5);
  const AutoLayout even = choose_auto_layout(c, {"parallel.ep"}, balanced);
  const AutoLayout uneven = choose_auto_layout(c, {"parallel.ep"}, skewed);
  EXPECT_EQ(even.best().layout.mesh.ep, 2);
  EXPECT_GT(uneven.best().time.step_s, even.best().time.step_s);
}

// Catches: a setting the search cannot keep silently dropped, or a bad mode accepted.
TEST(AutoLayout, RefusesWhatTheSearchCannotKeep) {
  RunConfig split = tiny_llama();
  split.pp_layers = "1,1";
  testing::expect_error([&] { constrained_space(split, {"parallel.pp_layers"}); },
                        {"parallel.pp_layers = \"1,1\" fixes a split it does not search"});
  RunConfig seq = tiny_llama();
  seq.pp_schedule = PipelineSchedule::seq1f1b, seq.pp_seq_chunks = 2;
  testing::expect_error([&] { constrained_space(seq, {"parallel.pp_schedule"}); },
                        {"does not search Seq1F1B: parallel.pp_schedule = \"seq1f1b\""});
  const Cluster cluster = make_cluster(builtin_device("h100-sxm"), 1, 4, 0);
  RunConfig odd = tiny_llama();
  odd.mesh.tp = 3;
  testing::expect_error([&] { choose_auto_layout(odd, {"parallel.tp"}, cluster); },
                        {"no layout of 4 devices keeps the settings given (parallel.tp = 3)"});
  testing::expect_error([] { layout_mode_from_name("x"); },
                        {"parallel.layout = \"x\" is not a layout mode: manual (the config's settings) or auto"});
}

}  // namespace
}  // namespace ndt
