// A run's whole life on one rank (issue 11): a non-finite step stops the run without
// persisting a bad state or pruning a good one; a run owns its folders (a lock naming
// the owner, stale locks taken over); checkpoints of another run are never deleted
// unless asked; what a run needs is checked before step 1; a checkpoint whose metadata
// contradicts itself is refused; train.init_from starts from exactly the given
// weights, and train.steps = 0 writes them as a checkpoint. The multi-rank forms (every
// rank agreeing) are in tests/mpi/test_checkpoint_resume.cpp and tests/launch.
#include "../common/one_rank_mesh.h"
#include "../common/errors.h"
#include "../mpi/parity.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/directory.h"
#include "checkpoint/reader.h"
#include "data/shard.h"
#include "interchange/hf_names.h"
#include "interchange/llmc.h"
#include "interchange/model_state.h"
#include "optim/weight_decay.h"
#include "test_support.h"
#include "train/model_checkpoint.h"
#include "train/run_lock.h"
#include "train/trainer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ndt {
namespace {

namespace fs = std::filesystem;

class RunLifecycle : public ::testing::Test {
 protected:
  RunLifecycle() { write_shard(dir_.file("train.bin"), testing::synthetic_text(20000, 7)); }

  RunConfig config() const {
    RunConfig c = testing::tiny_run(dir_.file("train.bin"), /*batch=*/4, /*micro=*/0);
    c.steps = 4;
    c.checkpoint_dir = dir_.file("ckpt");
    c.checkpoint_async = false;
    return c;
  }
  // Trains a fresh run to `steps`, saving at the end.
  void train_and_save(RunConfig c, int64_t steps) const {
    c.steps = steps;
    Trainer trainer(c, testing::one_rank_mesh(), nullptr);
    trainer.run();
  }
  std::string error_of(const RunConfig& c) const { return testing::trainer_error(c); }
  fs::path ckpt(int64_t step) const { return fs::path(dir_.file("ckpt")) / ckpt::checkpoint_dir_name(step); }
  testing::TempDir dir_;
};

// Every tensor of a committed checkpoint (parameters and moments) holds finite numbers.
void expect_all_finite(const fs::path& dir) {
  ckpt::CheckpointReader reader(dir);
  for (const std::string& name : reader.tensor_names()) {
    const Shape shape = reader.logical_shape(name);
    std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
    reader.read_block(name, shape, Shape(shape.size(), 0), shape, values.data());
    for (float v : values) ASSERT_TRUE(std::isfinite(v)) << dir << ": " << name;
  }
}

// Catches: a diverged run that trains on to exit 0, saving NaN checkpoints and pruning
// the last finite one (keep_last = 2, a save every step), or that applies the
// non-finite update before stopping.
TEST_F(RunLifecycle, NonFiniteStepStopsTheRunAndKeepsTheLastFiniteCheckpoint) {
  RunConfig c = config();
  c.steps = 40;
  c.schedule.max_lr = 1e6f;  // diverges to NaN within a few steps
  c.schedule.warmup_steps = 0;
  c.grad_clip = 0;
  c.checkpoint_every = 1;
  c.keep_last = 2;
  std::ostringstream log;
  Trainer trainer(c, testing::one_rank_mesh(), &log);
  std::string error;
  try {
    trainer.run();
  } catch (const Error& e) {
    error = e.what();
  }
  ASSERT_FALSE(error.empty()) << "the run did not stop:\n" << log.str();
  EXPECT_MENTIONS(error, "so training cannot go on; the update was not applied");
  const int64_t last = trainer.steps_done();
  EXPECT_LT(last, c.steps);
  EXPECT_MENTIONS(error, "The state after step " + std::to_string(last) + " (the last finite one) is saved in " +
                                   ckpt(last).string());
  EXPECT_MENTIONS(error, "optim.lr (now 1000000)");
  EXPECT_EQ(ckpt::committed_steps(dir_.file("ckpt")), (std::vector<int64_t>{last - 1, last}));
  for (int64_t step : ckpt::committed_steps(dir_.file("ckpt"))) expect_all_finite(ckpt(step));
  // The non-finite update was not applied: the model is still the last finite state.
  const ModelState saved = read_model_checkpoint(ckpt(last));
  std::vector<float> expected;
  for (const Parameter& p : trainer.model().store().params()) {
    const std::vector<float>& t = saved.tensors.at(p.name());
    expected.insert(expected.end(), t.begin(), t.end());
  }
  EXPECT_EQ(trainer.full_parameters(), expected);
}

// Catches: a NaN in the state written to disk whatever produced it (the guard is in
// the save itself, not only in the loss check).
TEST_F(RunLifecycle, SaveRefusesAStateWithANaN) {
  RunConfig c = config();
  Trainer trainer(c, testing::one_rank_mesh(), nullptr);
  trainer.step();
  trainer.save_checkpoint(/*async=*/false);
  trainer.step();
  trainer.model().store().values().data<float>()[5] = NAN;  // in wte.weight, the first parameter
  testing::expect_error([&] { trainer.save_checkpoint(/*async=*/false); },
                        {"the checkpoint of step 2 was not written", "wte.weight holds nan at element 5",
                         "the last one saved is step 1"});
  EXPECT_EQ(ckpt::committed_steps(dir_.file("ckpt")), (std::vector<int64_t>{1}));
  EXPECT_FALSE(fs::exists(fs::path(dir_.file("ckpt")) / "step-00000002.tmp"));
}

// Catches: two runs sharing a folder (the second deleting the first's checkpoints and
// interleaving its metrics), and a lock left by a dead run blocking the folder forever.
TEST_F(RunLifecycle, ARunOwnsItsFolders) {
  RunConfig c = config();
  c.out_dir = dir_.file("run");
  c.checkpoint_dir = "";
  {
    Trainer first(c, testing::one_rank_mesh(), nullptr);
    const std::string pid = "pid " + std::to_string(::getpid());
    EXPECT_MENTIONS(error_of(c), "runtime.out_dir = \"" + c.out_dir + "\" is in use by another run (host ");
    EXPECT_MENTIONS(error_of(c), pid);
    // Another out_dir but the same checkpoint folder: refused too.
    RunConfig other = c;
    other.out_dir = dir_.file("other");
    other.checkpoint_dir = c.out_dir + "/checkpoints";
    EXPECT_MENTIONS(error_of(other), "checkpoint.dir = \"" + other.checkpoint_dir + "\" is in use by another run");
    EXPECT_FALSE(fs::exists(dir_.file("other") + "/metrics.jsonl"));
  }
  EXPECT_EQ(error_of(c), "");  // released with the first run
  RunConfig same = c;
  same.checkpoint_dir = c.out_dir;  // one folder for both: locked once, not refused by itself
  EXPECT_EQ(error_of(same), "");
  // A lock file left by a run that died (the kernel released its lock): taken over, and said.
  {
    std::ofstream(c.out_dir + "/" + kRunLockFile) << "host elsewhere, pid 999999, started 2026-01-01 00:00:00 UTC\n";
  }
  std::ostringstream log;
  { Trainer trainer(c, testing::one_rank_mesh(), &log); }
  EXPECT_NE(log.str().find("was locked by a run that ended without releasing it (host elsewhere, pid 999999"),
            std::string::npos)
      << log.str();
  // A folder that cannot be created: named before step 1, with the reason.
  RunConfig unwritable = config();
  unwritable.checkpoint_dir = "/proc/ndtrain-test/ckpt";
  EXPECT_MENTIONS(error_of(unwritable), "checkpoint.dir = \"/proc/ndtrain-test/ckpt\": cannot create the folder");
}

// Catches: a fresh run silently deleting an earlier run's checkpoints (a forgotten
// --resume), and a resume from an older checkpoint deleting the newer ones.
TEST_F(RunLifecycle, CheckpointsOfAnotherRunAreDeletedOnlyWhenAsked) {
  train_and_save(config(), 2);
  const std::string fresh = error_of(config());
  EXPECT_MENTIONS(fresh, dir_.file("ckpt") + " holds 1 checkpoint of an earlier run (step-00000002)");
  EXPECT_MENTIONS(fresh, "continue it with --resume");
  EXPECT_MENTIONS(fresh, "start over with --overwrite (checkpoint.overwrite = true), which deletes them");
  EXPECT_TRUE(fs::exists(ckpt(2)));

  RunConfig resumed = config();
  resumed.resume = "latest";
  train_and_save(resumed, 4);  // saves step 4
  RunConfig older = config();
  older.resume = ckpt(2).string();
  EXPECT_MENTIONS(error_of(older), "holds checkpoints newer than the resumed step 2 (step-00000004)");
  EXPECT_TRUE(fs::exists(ckpt(4)));
  older.overwrite = true;
  EXPECT_EQ(error_of(older), "");
  EXPECT_FALSE(fs::exists(ckpt(4)));
  EXPECT_TRUE(fs::exists(ckpt(2)));

  RunConfig over = config();
  over.overwrite = true;
  std::ostringstream log;
  { Trainer trainer(over, testing::one_rank_mesh(), &log); }
  EXPECT_NE(log.str().find("deleted 1 checkpoint from " + dir_.file("ckpt") + " (checkpoint.overwrite): step-00000002"),
            std::string::npos)
      << log.str();
  EXPECT_FALSE(fs::exists(ckpt(2)));
}

// Catches: validation data checked only at the first evaluation (hours in), its
// message naming neither the key nor the file.
TEST_F(RunLifecycle, ValidationTokensAreCheckedBeforeStepOne) {
  std::vector<uint16_t> tokens = testing::synthetic_text(5000, 8);
  tokens[4000] = 300;
  write_shard(dir_.file("val.bin"), tokens);
  RunConfig c = config();
  c.val_data = dir_.file("val.bin");
  EXPECT_MENTIONS(error_of(c), "data.val = \"" + c.val_data +
                                         "\": token 300 at position 4000 is outside model.vocab_size = 256");
}

// Catches: a metadata.json whose step was edited (with a valid checksum) resuming at the
// wrong batch and learning rate.
TEST_F(RunLifecycle, ACheckpointThatContradictsItselfIsRefused) {
  train_and_save(config(), 2);
  const std::string path = (ckpt(2) / ckpt::kMetadataFile).string();
  std::ifstream in(path);
  const nlohmann::json original = nlohmann::json::parse(in);
  auto write = [&](const nlohmann::json& edited) {
    nlohmann::json m = edited;
    m["metadata_crc32c"] = ckpt::metadata_checksum(m);
    std::ofstream(path) << m.dump();
  };
  RunConfig c = config();
  c.resume = "latest";
  nlohmann::json m = original;
  m["state"]["step"] = 3;
  write(m);
  EXPECT_MENTIONS(error_of(c), "is inconsistent: step 3 but the data loader's next step 2");
  m["state"]["data"]["next_step"] = 3;
  write(m);
  EXPECT_MENTIONS(error_of(c), "is inconsistent: its folder is named step-00000002 but it holds step 3");
  m = original;
  m["state"]["optimizer_steps"] = 7;
  write(m);
  EXPECT_MENTIONS(error_of(c), "is inconsistent: 7 optimizer steps after 2 training steps");
  write(original);
  EXPECT_EQ(error_of(c), "");
}

// Catches: init_from loading a different model silently, not reaching every parameter,
// or keeping optimizer state; and train.steps = 0 not writing exactly those weights.
TEST_F(RunLifecycle, InitFromStartsFromExactlyTheGivenWeights) {
  const RunConfig base = config();
  Transformer source(base.model, /*seed=*/99);  // other weights than the run's seed gives
  const ModelState weights = state_of(source);
  save_safetensors_hf(weights, dir_.file("model.safetensors"));
  save_llmc(weights, dir_.file("model.bin"));
  write_model_checkpoint(weights, dir_.file("model_ckpt"));
  for (const std::string& file : {dir_.file("model.safetensors"), dir_.file("model.bin"), dir_.file("model_ckpt")}) {
    SCOPED_TRACE(file);
    testing::TempDir out;
    RunConfig c = base;
    c.checkpoint_dir = out.file("ckpt");
    c.init_from = file;
    c.steps = 0;
    std::ostringstream log;
    Trainer trainer(c, testing::one_rank_mesh(), &log);
    const std::vector<float> params = trainer.full_parameters();
    const std::vector<float> expected(source.store().values().data<float>(),
                                      source.store().values().data<float>() + source.store().numel());
    EXPECT_EQ(params, expected);
    trainer.run();  // train.steps = 0: saves step 0
    EXPECT_NE(log.str().find("initialised from " + file), std::string::npos) << log.str();
    const ModelState saved = read_model_checkpoint(fs::path(c.checkpoint_dir) / "step-00000000");
    EXPECT_EQ(saved.tensors, weights.tensors);
  }
  RunConfig deeper = base;
  deeper.model.n_layer = 3;
  deeper.init_from = dir_.file("model.safetensors");
  EXPECT_MENTIONS(error_of(deeper), "does not match the model; model.n_layer = 2 there, 3 in this run");
  RunConfig missing = base;
  missing.init_from = dir_.file("absent.safetensors");
  EXPECT_MENTIONS(error_of(missing), "absent.safetensors");
}

// Catches: after init_from the optimizer must start fresh: the first step equals that
// of a run whose random initialisation happens to be those weights.
TEST_F(RunLifecycle, InitFromTrainsLikeTheSameWeightsFromScratch) {
  RunConfig c = config();
  c.checkpoint_dir = "";
  c.seed = 5;
  RunConfig scratch = c;
  Transformer source(c.model, c.seed);
  save_safetensors_hf(state_of(source), dir_.file("same.safetensors"));
  c.init_from = dir_.file("same.safetensors");
  c.seed = 5;
  Trainer a(scratch, testing::one_rank_mesh(), nullptr), b(c, testing::one_rank_mesh(), nullptr);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(a.step().loss, b.step().loss) << "step " << s;
  EXPECT_EQ(a.full_parameters(), b.full_parameters());
}

// Catches: optim.weight_decay_policy parsed but not applied by the trainer.
TEST_F(RunLifecycle, TheTrainerAppliesTheWeightDecayPolicy) {
  RunConfig c = config();
  c.checkpoint_dir = "";
  for (auto [policy, embedding_decayed] : {std::pair{WeightDecayPolicy::matrices, false},
                                          {WeightDecayPolicy::matrices_and_embeddings, true}}) {
    c.weight_decay_policy = policy;
    Trainer trainer(c, testing::one_rank_mesh(), nullptr);
    const Parameter& wte = trainer.model().store().params().front();
    ASSERT_EQ(wte.name(), "wte.weight");
    EXPECT_EQ(wte.spec.weight_decay, embedding_decayed) << weight_decay_policy_name(policy);
  }
}

}  // namespace
}  // namespace ndt
