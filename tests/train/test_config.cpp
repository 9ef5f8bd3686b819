// Config parsing: every bad value is refused with the key and value in the message.
#include "test_support.h"
#include "train/config.h"

#include <gtest/gtest.h>

#include <fstream>

namespace ndt {
namespace {

class ConfigTest : public ::testing::Test {
 protected:
  ConfigTest() : dir_() {
    write_shard(dir_.file("train.bin"), testing::synthetic_text(1000, 1));
    write_file("base.toml", "[model]\npreset = \"gpt2-tiny\"\n[data]\ntrain = \"" + dir_.file("train.bin") + "\"\n");
  }
  void write_file(const std::string& name, const std::string& text) {
    std::ofstream(dir_.file(name)) << text;
  }
  // The message of the error load_run_config throws, or "" if it does not throw.
  std::string error_of(const std::vector<std::string>& overrides, const std::string& file = "base.toml") {
    try {
      load_run_config(dir_.file(file), overrides);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  testing::TempDir dir_;
};

#define EXPECT_ERROR_MENTIONS(message, text) \
  EXPECT_NE((message).find(text), std::string::npos) << "message: \"" << (message) << "\""

TEST_F(ConfigTest, ValidFileWithOverrides) {
  RunConfig c = load_run_config(dir_.file("base.toml"), {"train.steps=7", "model.n_layer=3", "optim.lr=0.01"});
  EXPECT_EQ(c.steps, 7);
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.model.d_model, 128);  // from the preset
  EXPECT_FLOAT_EQ(c.schedule.max_lr, 0.01f);
}

TEST_F(ConfigTest, ExplicitModelKeysOverrideThePreset) {
  write_file("order.toml", "[model]\nn_layer = 1\npreset = \"gpt2-tiny\"\n[data]\ntrain = \"" +
                               dir_.file("train.bin") + "\"\n");
  EXPECT_EQ(load_run_config(dir_.file("order.toml"), {}).model.n_layer, 1);
}

TEST_F(ConfigTest, NegativeSizes) {
  EXPECT_ERROR_MENTIONS(error_of({"model.n_layer=-2"}), "model.n_layer = -2");
  EXPECT_ERROR_MENTIONS(error_of({"train.batch_size=-8"}), "train.batch_size = -8");
  EXPECT_ERROR_MENTIONS(error_of({"train.seq_len=0"}), "train.seq_len = 0");
  EXPECT_ERROR_MENTIONS(error_of({"model.d_model=-64"}), "model.d_model = -64");
}

TEST_F(ConfigTest, HeadsMustDivideWidth) {
  EXPECT_ERROR_MENTIONS(error_of({"model.n_head=5"}), "model.n_head = 5 does not divide model.d_model = 128");
}

TEST_F(ConfigTest, OtherInconsistencies) {
  EXPECT_ERROR_MENTIONS(error_of({"train.micro_batch_size=3"}), "train.micro_batch_size = 3");
  EXPECT_ERROR_MENTIONS(error_of({"train.seq_len=512"}), "train.seq_len = 512 exceeds model.max_seq_len = 256");
  EXPECT_ERROR_MENTIONS(error_of({"optim.beta2=1.5"}), "optim.beta2 = 1.5");
  EXPECT_ERROR_MENTIONS(error_of({"runtime.threads=-1"}), "runtime.threads = -1");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.cp=0"}), "parallel.cp = 0 must be at least 1");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.pp=0"}), "parallel.pp = 0 must be at least 1");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.dp_replicate=-1"}), "parallel.dp_replicate = -1");
  EXPECT_ERROR_MENTIONS(error_of({"runtime.comm_timeout_s=0"}), "runtime.comm_timeout_s = 0");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.bucket_mb=0"}), "parallel.bucket_mb = 0");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.zero_stage=5"}), "parallel.zero_stage = 5 must be 0, 1, 2 or 3");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.dp_shard=2"}), "parallel.dp_shard = 2 shards with ZeRO");
  EXPECT_ERROR_MENTIONS(error_of({"model.arch=bert"}), "model.arch = \"bert\"");
  EXPECT_ERROR_MENTIONS(error_of({"model.preset=gpt5"}), "model.preset = \"gpt5\"");
}

TEST_F(ConfigTest, TensorParallelSizesMustDivide) {
  EXPECT_ERROR_MENTIONS(error_of({"parallel.tp=3"}), "model.n_head = 4 is not divisible by parallel.tp = 3");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.tp=2", "model.preset=llama-tiny", "model.n_kv_head=1"}),
                        "model.n_kv_head = 1 is not divisible by parallel.tp = 2");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.tp=4", "model.d_ff=510"}), "model.d_ff = 510 is not divisible by parallel.tp = 4");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.tp=2", "model.vocab_size=257"}),
                        "model.vocab_size = 257 is not divisible by parallel.tp = 2");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.tp=4", "parallel.sequence_parallel=true", "train.seq_len=30"}),
                        "train.seq_len (sequence parallel splits tokens) = 30 is not divisible by parallel.tp = 4");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.tp=0"}), "parallel.tp = 0 must be positive");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.sequence_parallel=true"}),
                        "parallel.sequence_parallel = true needs parallel.tp > 1");
}

// USP: cp_ulysses only under cp_mode "usp", dividing cp and strictly between 1 and it;
// this rank's heads and KV heads (after tp) dividing by cp_ulysses.
TEST_F(ConfigTest, UspSettings) {
  EXPECT_EQ(error_of({"parallel.cp=4", "parallel.cp_mode=usp", "parallel.cp_ulysses=2", "train.seq_len=128"}), "");
  EXPECT_EQ(error_of({"parallel.cp=6", "parallel.cp_mode=usp", "parallel.cp_ulysses=2", "parallel.cp_chunks=contiguous",
                      "train.seq_len=36"}),
            "");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.cp=4", "parallel.cp_ulysses=2", "train.seq_len=128"}),
                        "parallel.cp_ulysses = 2 applies to parallel.cp_mode = \"usp\" only (parallel.cp_mode = "
                        "\"ring\")");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.cp=4", "parallel.cp_mode=ulysses", "parallel.cp_ulysses=4",
                                  "train.seq_len=128"}),
                        "parallel.cp_ulysses = 4 applies to parallel.cp_mode = \"usp\" only (parallel.cp_mode = "
                        "\"ulysses\")");
  for (const char* ulysses : {"parallel.cp_ulysses=1", "parallel.cp_ulysses=4", "parallel.cp_ulysses=3"}) {
    EXPECT_ERROR_MENTIONS(error_of({"parallel.cp=4", "parallel.cp_mode=usp", ulysses, "train.seq_len=128"}),
                          "parallel.cp_mode = \"usp\" needs parallel.cp_ulysses (the Ulysses ranks of each group; the "
                          "rest of parallel.cp is the ring) to divide parallel.cp = 4 and lie strictly between 1 and it, "
                          "not " + std::string(ulysses).substr(20));
  }
  EXPECT_ERROR_MENTIONS(error_of({"parallel.cp=4", "parallel.cp_mode=usp", "parallel.cp_ulysses=2", "train.seq_len=100"}),
                        "train.seq_len = 100 must divide into 8 chunks of equal length for parallel.cp = 4 with zigzag");
  // gpt2-tiny has 4 heads: 1 per tp rank at tp = 4; llama-tiny with 2 KV heads and tp = 2: 1.
  EXPECT_ERROR_MENTIONS(error_of({"parallel.cp=4", "parallel.tp=4", "parallel.cp_mode=usp", "parallel.cp_ulysses=2",
                                  "train.seq_len=128"}),
                        "parallel.cp_mode = \"usp\" splits the attention heads over parallel.cp_ulysses = 2: this "
                        "rank's 1 heads and 1 KV heads (after tensor parallelism) must both divide by it");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.cp=4", "parallel.tp=2", "parallel.cp_mode=usp", "parallel.cp_ulysses=2",
                                  "model.preset=llama-tiny", "model.n_kv_head=2", "train.seq_len=128"}),
                        "this rank's 2 heads and 1 KV heads");
}

TEST_F(ConfigTest, ContextParallelSettings) {
  EXPECT_EQ(error_of({"parallel.cp=2", "train.seq_len=128"}), "");
  EXPECT_EQ(error_of({"parallel.cp=4", "parallel.cp_mode=ulysses", "parallel.cp_chunks=contiguous", "train.seq_len=36"}),
            "");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.cp=2", "train.seq_len=30"}),
                        "train.seq_len = 30 must divide into 4 chunks of equal length for parallel.cp = 2 with zigzag "
                        "chunks");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.cp=4", "parallel.cp_chunks=contiguous", "train.seq_len=30"}),
                        "train.seq_len = 30 must divide into 4 chunks of equal length for parallel.cp = 4 with "
                        "contiguous chunks");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.cp_mode=star"}), "parallel.cp_mode = \"star\" is not a context-parallel "
                                                           "mode: ring, ulysses or usp");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.cp_chunks=random"}), "parallel.cp_chunks = \"random\" is not a chunk "
                                                                "layout: zigzag or contiguous");
  // gpt2-tiny has 4 heads (and 4 KV heads); llama-tiny with 2 KV heads.
  EXPECT_ERROR_MENTIONS(error_of({"parallel.cp=8", "parallel.cp_mode=ulysses", "train.seq_len=128"}),
                        "parallel.cp_mode = \"ulysses\" splits the attention heads over parallel.cp = 8: this rank's "
                        "4 heads and 4 KV heads");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.cp=4", "parallel.tp=2", "parallel.cp_mode=ulysses", "train.seq_len=128"}),
                        "parallel.cp = 4: this rank's 2 heads and 2 KV heads");
  EXPECT_EQ(error_of({"parallel.cp=2", "parallel.tp=2", "parallel.cp_mode=ulysses", "train.seq_len=128"}), "");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.cp=4", "parallel.cp_mode=ulysses", "model.preset=llama-tiny",
                                  "model.n_kv_head=2", "train.seq_len=128"}),
                        "4 heads and 2 KV heads (after tensor parallelism) must both divide by it");
  // Sequence parallel splits each cp rank's tokens over tp.
  EXPECT_ERROR_MENTIONS(error_of({"parallel.cp=2", "parallel.tp=4", "parallel.sequence_parallel=true",
                                  "train.seq_len=20"}),
                        "each context-parallel rank's train.seq_len / parallel.cp = 10 tokens are not divisible by "
                        "parallel.tp = 4");
}

TEST_F(ConfigTest, MixtureOfExpertsSettings) {
  EXPECT_EQ(error_of({"model.n_experts=8", "model.moe_top_k=2"}), "");
  EXPECT_EQ(error_of({"model.preset=llama-moe-tiny", "parallel.ep=2", "parallel.dp_shard=2"}), "");
  EXPECT_ERROR_MENTIONS(error_of({"model.n_experts=4", "model.moe_top_k=5"}),
                        "model.moe_top_k = 5 exceeds model.n_experts = 4");
  EXPECT_ERROR_MENTIONS(error_of({"model.n_experts=4", "model.moe_every=9"}),
                        "model.moe_every = 9 exceeds model.n_layer = 4");
  EXPECT_ERROR_MENTIONS(error_of({"model.n_experts=4", "model.moe_score=relu"}),
                        "model.moe_score = \"relu\" is not a router score (softmax, sigmoid)");
  EXPECT_ERROR_MENTIONS(error_of({"model.n_experts=4", "model.moe_capacity_factor=-1"}),
                        "model.moe_capacity_factor = -1 must be positive (or 0: dropless)");
  EXPECT_ERROR_MENTIONS(error_of({"model.n_experts=4", "model.moe_aux_loss=-0.1"}), "model.moe_aux_loss = -0.1");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.ep=2", "parallel.dp_shard=2"}),
                        "parallel.ep = 2 needs a mixture-of-experts model (model.n_experts > 0)");
  EXPECT_ERROR_MENTIONS(error_of({"model.n_experts=6", "parallel.ep=4", "parallel.dp_shard=4"}),
                        "model.n_experts = 6 does not split over parallel.ep = 4");
  EXPECT_EQ(error_of({"model.n_experts=4", "parallel.ep=2", "parallel.dp_shard=4", "parallel.zero_stage=3"}), "");
  EXPECT_ERROR_MENTIONS(error_of({"model.n_experts=4", "model.moe_capacity_factor=1.5", "parallel.cp=2"}),
                        "model.moe_capacity_factor = 1.5 with parallel.cp = 2 is not supported");
  EXPECT_EQ(error_of({"model.n_experts=4", "precision.compute=bf16"}), "");
  EXPECT_EQ(error_of({"model.n_experts=4", "precision.compute=fp16"}), "");
  EXPECT_ERROR_MENTIONS(error_of({"model.n_experts=4", "precision.compute=bf16", "precision.fp8=true"}),
                        "model.n_experts = 4 (mixture of experts) with precision.fp8 = true is not supported");
  // ep borrows the data-parallel ranks dp_shard x cp: checked against the world size.
  RunConfig c = load_run_config(dir_.file("base.toml"), {"model.n_experts=8", "parallel.ep=4", "parallel.dp_shard=2"});
  try {
    c.resolve_mesh(2);
    ADD_FAILURE() << "ep = 4 over 2 data-parallel ranks was accepted";
  } catch (const Error& e) {
    EXPECT_ERROR_MENTIONS(std::string(e.what()),
                          "parallel.ep = 4 must divide the data-parallel ranks it borrows, parallel.dp_shard x cp = 2 "
                          "x 1 = 2");
  }
}

TEST_F(ConfigTest, StabilitySettings) {
  EXPECT_ERROR_MENTIONS(error_of({"stability.on_spike=panic"}),
                        "stability.on_spike = \"panic\" is not an action: warn, skip or rollback");
  EXPECT_ERROR_MENTIONS(error_of({"stability.on_nonfinite=ignore"}),
                        "stability.on_nonfinite = \"ignore\" is not an action: stop, skip or rollback");
  EXPECT_ERROR_MENTIONS(error_of({"stability.on_spike=rollback"}),
                        "reloads the newest checkpoint: set checkpoint.every > 0 (now 0)");
  EXPECT_EQ(error_of({"stability.on_spike=rollback", "checkpoint.every=10"}), "");
  EXPECT_ERROR_MENTIONS(error_of({"stability.spike_window=1"}), "stability.spike_window = 1 must be at least 2");
  EXPECT_ERROR_MENTIONS(error_of({"stability.spike_min_samples=40"}),
                        "stability.spike_min_samples = 40 must lie in [2, stability.spike_window = 32]");
  EXPECT_ERROR_MENTIONS(error_of({"stability.spike_zscore=0"}), "stability.spike_zscore = 0 must be positive");
  EXPECT_ERROR_MENTIONS(error_of({"stability.spike_min_increase=-1"}), "stability.spike_min_increase = -1");
  EXPECT_ERROR_MENTIONS(error_of({"stability.max_rollbacks=-1"}), "stability.max_rollbacks = -1");
  EXPECT_ERROR_MENTIONS(error_of({"stability.rollback_window=0"}), "stability.rollback_window = 0");
  EXPECT_ERROR_MENTIONS(error_of({"stability.rollback_lr_factor=2"}), "stability.rollback_lr_factor = 2 must lie in (0, 1]");
  EXPECT_ERROR_MENTIONS(error_of({"stability.rollback_lr_steps=-5"}), "stability.rollback_lr_steps = -5");
  for (const char* bad : {"5", "a:2", "5:0", "-1:2", "3:2x"}) {
    EXPECT_ERROR_MENTIONS(error_of({std::string("debug.corrupt_batches=") + bad}),
                          std::string("debug.corrupt_batches = \"") + bad + "\" is not FIRST:COUNT");
  }
  EXPECT_EQ(error_of({"debug.corrupt_batches=40:2"}), "");
}

TEST_F(ConfigTest, CheckpointSettings) {
  EXPECT_ERROR_MENTIONS(error_of({"checkpoint.every=-5"}), "checkpoint.every = -5 must not be negative");
  EXPECT_ERROR_MENTIONS(error_of({"checkpoint.keep_last=0"}), "checkpoint.keep_last = 0 must be at least 1");
  EXPECT_ERROR_MENTIONS(error_of({"optim.decay_steps=-1"}), "optim.decay_steps = -1 must not be negative");
}

TEST_F(ConfigTest, UnknownKeys) {
  EXPECT_ERROR_MENTIONS(error_of({"train.stepz=3"}), "unknown config key \"train.stepz\"");
  write_file("unknown.toml", "[optim]\nlearning_rate = 0.1\n");
  EXPECT_ERROR_MENTIONS(error_of({}, "unknown.toml"), "unknown config key \"optim.learning_rate\"");
}

TEST_F(ConfigTest, BadValuesAndSyntax) {
  EXPECT_ERROR_MENTIONS(error_of({"train.steps=ten"}), "train.steps = \"ten\" is not a valid integer");
  EXPECT_ERROR_MENTIONS(error_of({"model.qk_norm=yes"}), "model.qk_norm = \"yes\" is not a boolean");
  EXPECT_ERROR_MENTIONS(error_of({"train.steps"}), "--set \"train.steps\"");
  write_file("broken.toml", "[train\nsteps = 3\n");
  EXPECT_ERROR_MENTIONS(error_of({}, "broken.toml"), "broken.toml");
}

// Catches: a misspelt layout mode silently training the config's layout, a check over no
// steps, an experts' load below balanced, or explicitly given keys (auto's constraints)
// lost or invented.
TEST_F(ConfigTest, LayoutSettings) {
  EXPECT_ERROR_MENTIONS(error_of({"parallel.layout=x"}),
                        "parallel.layout = \"x\" is not a layout mode: manual (the config's settings) or auto");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.layout_check_steps=0"}), "parallel.layout_check_steps = 0 must be at least 1");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.layout_expert_load=0.5"}),
                        "parallel.layout_expert_load = 0.5 must be at least 1 (1: balanced routing");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.layout_expert_load=nan"}), "parallel.layout_expert_load = nan is not a finite");
  EXPECT_EQ(load_run_config(dir_.file("base.toml"), {"parallel.layout=auto"}).layout, LayoutMode::automatic);
  EXPECT_EQ(load_run_config(dir_.file("base.toml"), {}).layout, LayoutMode::manual);
  write_file("tp.toml", "[model]\npreset = \"gpt2-tiny\"\n[parallel]\ntp = 1\n[train]\nmicro_batch_size = 2\n");
  EXPECT_EQ(given_config_keys(dir_.file("tp.toml"), {"parallel.zero_stage=3"}),
            (std::vector<std::string>{"model.preset", "parallel.tp", "train.micro_batch_size", "parallel.zero_stage"}));
}

// Catches: a misspelt policy silently training without checkpointing, and an `every`
// that cannot mean anything accepted.
TEST_F(ConfigTest, ActivationCheckpointingSettings) {
  EXPECT_ERROR_MENTIONS(error_of({"train.activation_checkpointing=partial"}),
                        "train.activation_checkpointing = \"partial\" is not a policy: none, full or selective");
  EXPECT_ERROR_MENTIONS(error_of({"train.activation_checkpointing=full", "train.activation_checkpointing_every=0"}),
                        "train.activation_checkpointing_every = 0 must be at least 1");
  EXPECT_ERROR_MENTIONS(
      error_of({"train.activation_checkpointing=selective", "train.activation_checkpointing_every=2"}),
      "train.activation_checkpointing_every = 2 applies to full recompute, but train.activation_checkpointing = "
      "\"selective\"");
  EXPECT_EQ(error_of({"train.activation_checkpointing=full", "train.activation_checkpointing_every=3"}), "");
  const RunConfig c = load_run_config(dir_.file("base.toml"), {"train.activation_checkpointing=selective"});
  EXPECT_EQ(c.activation_checkpointing.mode, CheckpointMode::selective);
}

// Catches: Seq1F1B accepted where its sequence chunks cannot run (k not dividing the
// sequence, k = 1, context parallelism, document boundaries, MoE, recompute, low
// precision), or refused without the setting and its value.
TEST_F(ConfigTest, Seq1F1BRefusalsNameTheSettings) {
  const std::vector<std::string> seq = {"parallel.pp=2", "parallel.pp_schedule=seq1f1b", "train.seq_len=64"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), seq.begin(), seq.end());
    return error_of(more);
  };
  EXPECT_EQ(with({"parallel.pp_seq_chunks=4"}), "");
  EXPECT_ERROR_MENTIONS(with({"parallel.pp_seq_chunks=3"}), "parallel.pp_seq_chunks >= 2 dividing train.seq_len = 64, got 3");
  EXPECT_ERROR_MENTIONS(with({}), "parallel.pp_seq_chunks >= 2 dividing train.seq_len = 64, got 1");
  EXPECT_ERROR_MENTIONS(with({"parallel.pp_seq_chunks=2", "parallel.cp=2"}), "not supported with parallel.cp = 2");
  EXPECT_ERROR_MENTIONS(with({"parallel.pp_seq_chunks=2", "data.document_boundaries=true"}),
                        "not supported with data.document_boundaries = true");
  EXPECT_ERROR_MENTIONS(with({"parallel.pp_seq_chunks=2", "model.n_experts=4", "model.moe_top_k=2"}),
                        "not supported with model.n_experts = 4");
  EXPECT_ERROR_MENTIONS(with({"parallel.pp_seq_chunks=2", "train.activation_checkpointing=selective"}),
                        "(parallel.pp_seq_chunks = 2) is not supported with train.activation_checkpointing = \"selective\"");
  EXPECT_ERROR_MENTIONS(with({"parallel.pp_seq_chunks=2", "precision.compute=bf16"}),
                        "not supported with precision.compute = \"bf16\"");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.pp=2", "parallel.pp_seq_chunks=2"}),
                        "parallel.pp_seq_chunks = 2 cuts micro-batches into sequence chunks");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.pp_seq_chunks=2"}), "apply with parallel.pp > 1");
}

// Catches: pipeline settings that cannot run accepted until the first step (or never).
TEST_F(ConfigTest, PipelineSettings) {
  EXPECT_ERROR_MENTIONS(error_of({"parallel.pp=2", "parallel.pp_schedule=dualpipe"}),
                        "parallel.pp_schedule = \"dualpipe\"");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.pp=4", "parallel.pp_schedule=interleaved_1f1b", "parallel.pp_virtual_stages=2",
                                  "model.n_layer=4"}),
                        "8 chunks need at least 7 blocks");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.pp_virtual_stages=2"}), "apply with parallel.pp > 1");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.pp=2", "parallel.pp_layers=1,x"}), "\"x\" is not a number of blocks");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.pp=2", "parallel.pp_layers=1,5"}), "sums to 6 blocks");
  // Zero bubble with recompute and low precision trains (tests/mpi/test_zero_bubble.cpp).
  EXPECT_EQ(error_of({"parallel.pp=2", "parallel.pp_schedule=zb_h1", "train.activation_checkpointing=full",
                      "precision.compute=bf16"}),
            "");
  EXPECT_EQ(error_of({"parallel.pp=2", "parallel.pp_schedule=zb_v", "parallel.pp_virtual_stages=2",
                      "train.activation_checkpointing=selective", "precision.compute=bf16"}),
            "");
  for (const char* v : {"1", "3"}) {
    const RunConfig one = load_run_config(dir_.file("base.toml"), {"parallel.pp=2", "parallel.pp_schedule=zb_v",
                                                                   std::string("parallel.pp_virtual_stages=") + v,
                                                                   "model.n_layer=6"});
    try {
      one.resolve_mesh(2);
      ADD_FAILURE() << "expected an error for v = " << v;
    } catch (const Error& e) {
      EXPECT_ERROR_MENTIONS(std::string(e.what()), std::string("needs parallel.pp_virtual_stages = 2, got ") + v);
    }
  }
  const RunConfig three = load_run_config(dir_.file("base.toml"), {"parallel.pp=3"});
  try {
    three.resolve_mesh(2);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_ERROR_MENTIONS(std::string(e.what()), "the world size 2 is not a multiple of parallel.pp x dp_shard x cp x tp = 3");
  }
  // The micro-batch count is known once the mesh is: interleaving needs a multiple of pp.
  const RunConfig c = load_run_config(dir_.file("base.toml"),
                                      {"parallel.pp=2", "parallel.pp_schedule=interleaved_1f1b",
                                       "parallel.pp_virtual_stages=2", "model.n_layer=4", "train.batch_size=6",
                                       "train.micro_batch_size=2"});
  try {
    c.resolve_mesh(2);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_ERROR_MENTIONS(std::string(e.what()), "multiple");
  }
}

TEST_F(ConfigTest, MissingFiles) {
  EXPECT_ERROR_MENTIONS(error_of({"data.train=/nonexistent/train.bin"}), "data.train = \"/nonexistent/train.bin\"");
  EXPECT_ERROR_MENTIONS(error_of({"data.val=/nonexistent/val.bin"}), "data.val = \"/nonexistent/val.bin\"");
  EXPECT_ERROR_MENTIONS(error_of({}, "missing.toml"), "missing.toml");
}

// Catches: a folder given as an input file reported as "does not exist".
TEST_F(ConfigTest, APathThatIsAFolderIsNamedAsSuch) {
  EXPECT_ERROR_MENTIONS(error_of({"data.train=" + dir_.path().string()}),
                        "data.train = \"" + dir_.path().string() + "\" is a directory, not a file");
  EXPECT_ERROR_MENTIONS(error_of({"data.val=" + dir_.path().string()}),
                        "data.val = \"" + dir_.path().string() + "\" is a directory, not a file");
  EXPECT_ERROR_MENTIONS(error_of({}, "."), "is a directory, not a file");
  EXPECT_ERROR_MENTIONS(error_of({"data.val=/dev/null"}), "data.val = \"/dev/null\" is not a regular file");
  EXPECT_ERROR_MENTIONS(error_of({"data.val=" + dir_.file("gone.bin")}), "gone.bin\" does not exist");
}

// Catches: nan or infinity accepted for a float key (optim.lr = inf trained to NaN).
TEST_F(ConfigTest, NonFiniteNumbersAreRefused) {
  for (const std::string key : {"optim.lr", "optim.weight_decay", "optim.grad_clip", "model.init_std",
                                "sample.temperature", "parallel.bucket_mb", "runtime.comm_timeout_s",
                                "runtime.peak_gflops"}) {
    for (const std::string value : {"nan", "inf", "-inf", "infinity"}) {
      EXPECT_ERROR_MENTIONS(error_of({key + "=" + value}), key + " = " + value + " is not a finite number");
    }
  }
  write_file("inf.toml", "[optim]\nlr = inf\n");
  EXPECT_ERROR_MENTIONS(error_of({}, "inf.toml"), "optim.lr = inf is not a finite number");
  EXPECT_ERROR_MENTIONS(error_of({"runtime.comm_timeout_s=1e999"}), "runtime.comm_timeout_s = 1e999 is out of range");
}

// Catches: a bucket smaller than one float passing as "positive" and then failing
// (or dividing by zero) when the buckets are made.
TEST_F(ConfigTest, BucketOfLessThanOneFloatNamesTheSmallest) {
  EXPECT_ERROR_MENTIONS(error_of({"parallel.bucket_mb=1e-9"}),
                        "parallel.bucket_mb = 1e-09 is smaller than one float (4 bytes): the smallest bucket is "
                        "3.814697265625e-06 MiB");
  EXPECT_EQ(error_of({"parallel.bucket_mb=3.814697265625e-06"}), "");
  EXPECT_ERROR_MENTIONS(error_of({"parallel.bucket_mb=1e300"}), "parallel.bucket_mb = 1e+300 exceeds");
}

// Catches: checkpoint.every set with nowhere to save, so a long run silently saves nothing.
TEST_F(ConfigTest, CheckpointEveryNeedsAFolder) {
  const std::string message = error_of({"checkpoint.every=10", "runtime.out_dir="});
  EXPECT_ERROR_MENTIONS(message, "checkpoint.every = 10");
  EXPECT_ERROR_MENTIONS(message, "checkpoint.dir and runtime.out_dir are both empty");
  EXPECT_EQ(error_of({"checkpoint.every=10", "runtime.out_dir=", "checkpoint.dir=" + dir_.file("ckpt")}), "");
  EXPECT_EQ(error_of({"checkpoint.every=0", "runtime.out_dir="}), "");
}

// Catches: a sample that cannot be made found only after training (empty prompt, or a
// prompt byte the model has no token for).
TEST_F(ConfigTest, SampleSettingsAreCheckedBeforeTraining) {
  EXPECT_ERROR_MENTIONS(error_of({"sample.prompt="}), "sample.tokens = 200 needs a sample.prompt");
  EXPECT_EQ(error_of({"sample.prompt=", "sample.tokens=0"}), "");
  const std::string message = error_of({"model.vocab_size=100", "sample.prompt=ok z"});
  EXPECT_ERROR_MENTIONS(message, "sample.prompt byte 111 (at 0)");
  EXPECT_ERROR_MENTIONS(message, "model.vocab_size = 100");
  EXPECT_EQ(error_of({"model.vocab_size=100", "sample.prompt=A"}), "");
}

// Catches: model.arch = "llama" alone keeping gpt2's tied output layer, or the family's
// default overriding an explicit model.tied_embeddings that came first.
TEST_F(ConfigTest, ArchSetsTheFamilyDefaultsAndExplicitKeysWin) {
  EXPECT_FALSE(load_run_config(dir_.file("base.toml"), {"model.arch=llama"}).model.tied_embeddings);
  EXPECT_TRUE(load_run_config(dir_.file("base.toml"), {"model.arch=llama", "model.tied_embeddings=true"})
                  .model.tied_embeddings);
  EXPECT_TRUE(load_run_config(dir_.file("base.toml"), {"model.tied_embeddings=true", "model.arch=llama"})
                  .model.tied_embeddings);
  write_file("tied_first.toml", "[model]\ntied_embeddings = true\narch = \"llama\"\n[data]\ntrain = \"" +
                                    dir_.file("train.bin") + "\"\n");
  EXPECT_TRUE(load_run_config(dir_.file("tied_first.toml"), {}).model.tied_embeddings);
  EXPECT_TRUE(load_run_config(dir_.file("tied_first.toml"), {"model.arch=gpt2"}).model.tied_embeddings);
  EXPECT_FALSE(load_run_config(dir_.file("base.toml"), {"model.arch=llama", "model.arch=llama"}).model.tied_embeddings);
  // The presets are unchanged.
  EXPECT_TRUE(load_run_config(dir_.file("base.toml"), {}).model.tied_embeddings);
  EXPECT_FALSE(load_run_config(dir_.file("base.toml"), {"model.preset=llama-tiny"}).model.tied_embeddings);
  EXPECT_TRUE(
      load_run_config(dir_.file("base.toml"), {"model.preset=llama-tiny", "model.tied_embeddings=true"}).model.tied_embeddings);
  EXPECT_TRUE(load_run_config("", {"data.train=" + dir_.file("train.bin")}).model.tied_embeddings);
}

// Catches: optim.weight_decay_policy not parsed into the run config, or an unknown
// policy accepted.
TEST_F(ConfigTest, WeightDecayPolicy) {
  EXPECT_EQ(load_run_config(dir_.file("base.toml"), {}).weight_decay_policy, WeightDecayPolicy::matrices);
  EXPECT_EQ(load_run_config(dir_.file("base.toml"), {"optim.weight_decay_policy=matrices_and_embeddings"})
                .weight_decay_policy,
            WeightDecayPolicy::matrices_and_embeddings);
  EXPECT_ERROR_MENTIONS(error_of({"optim.weight_decay_policy=embeddings"}),
                        "optim.weight_decay_policy = \"embeddings\" is not a known policy (matrices, "
                        "matrices_and_embeddings, all)");
}

// Catches: an offload setting the layouts cannot honour accepted (and failing later, or
// silently training in memory), or an error that does not name the key and value.
TEST_F(ConfigTest, BadOffloadSettingsAreRefusedByName) {
  const std::vector<std::string> on = {"offload.optimizer=disk", "parallel.zero_stage=1"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), on.begin(), on.end());
    return error_of(more);
  };
  EXPECT_EQ(with({}), "");
  EXPECT_ERROR_MENTIONS(error_of({"offload.optimizer=ram"}), "offload.optimizer = \"ram\" is not none or disk");
  EXPECT_ERROR_MENTIONS(error_of({"offload.params=ssd"}), "offload.params = \"ssd\" is not none or disk");
  EXPECT_ERROR_MENTIONS(error_of({"offload.optimizer=disk"}), "offload.optimizer = \"disk\" needs parallel.zero_stage >= 1, not 0");
  EXPECT_ERROR_MENTIONS(with({"offload.params=disk", "parallel.zero_stage=2"}),
                        "offload.params = \"disk\" needs parallel.zero_stage = 3 (FSDP");
  EXPECT_ERROR_MENTIONS(error_of({"offload.params=disk", "parallel.zero_stage=3"}),
                        "offload.params = \"disk\" needs offload.optimizer = \"disk\" too");
  EXPECT_ERROR_MENTIONS(with({"offload.params=disk", "parallel.zero_stage=3", "parallel.dp_replicate=2"}),
                        "offload.params = \"disk\" with parallel.dp_replicate = 2 (HSDP) is not supported");
  EXPECT_ERROR_MENTIONS(with({"offload.chunk_mb=0"}), "offload.chunk_mb = 0 must lie in");
  EXPECT_ERROR_MENTIONS(with({"offload.chunk_mb=2048"}), "offload.chunk_mb = 2048 must lie in");
  EXPECT_ERROR_MENTIONS(with({"offload.chunk_mb=0.01"}), "offload.chunk_mb = 0.01 is not a whole number of 4 KiB pages");
  EXPECT_ERROR_MENTIONS(with({"offload.prefetch=-1"}), "offload.prefetch = -1 must lie in [0, 64]");
  EXPECT_ERROR_MENTIONS(with({"offload.prefetch=65"}), "offload.prefetch = 65 must lie in [0, 64]");
  EXPECT_ERROR_MENTIONS(with({"offload.io=aio"}), "offload.io = \"aio\" is not an I/O backend: io_uring or threads");
  EXPECT_ERROR_MENTIONS(with({"runtime.out_dir="}), "offload.optimizer = \"disk\" needs a folder for its swap files");
  EXPECT_EQ(with({"runtime.out_dir=", "offload.dir=/tmp/x"}), "");
  // dp_replicate defaults from the world: the check comes when the mesh is resolved.
  RunConfig c = load_run_config(dir_.file("base.toml"), {"offload.optimizer=disk", "offload.params=disk",
                                                         "parallel.zero_stage=3", "parallel.dp_shard=1",
                                                         "train.batch_size=8"});
  try {
    c.resolve_mesh(2);
    ADD_FAILURE() << "two replicas accepted";
  } catch (const Error& e) {
    EXPECT_ERROR_MENTIONS(std::string(e.what()), "offload.params = \"disk\" with 2 data-parallel replicas");
  }
  // Left automatic on two nodes of two ranks, dp_shard spans both nodes (no replicas), not HSDP's one node.
  c.mesh.dp_shard = 0;
  const MeshShape m = c.resolve_mesh(4, 2);
  EXPECT_EQ(m.dp_shard, 4);
  EXPECT_EQ(m.dp_replicate, 1);
}

TEST(ConfigDocs, EveryKeyIsDocumented) {
  const auto docs = config_field_docs();
  EXPECT_GT(docs.size(), 30u);
  for (const ConfigFieldDoc& d : docs) EXPECT_GT(d.doc.size(), 10u) << d.key;
}

}  // namespace
}  // namespace ndt
