// Stop signals at awkward moments, on the binary (docs/checkpoints.md,
// src/train/stop_signal.h): Ctrl-C (SIGINT) on a one-process run saves and exits 130 as
// SIGTERM saves and exits 143; SIGTERM during the final evaluation ends it (the state
// is saved already) and the exit code still says the run was stopped.
#include "../common/command.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "checkpoint/directory.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace ndt {
namespace {

namespace fs = std::filesystem;

class StopSignals : public ::testing::Test {
 protected:
  StopSignals() {
    write_shard(dir_.file("train.bin"), testing::synthetic_text(40000, 5));
    std::ofstream(dir_.file("run.toml"))
        << "[model]\npreset = \"gpt2-tiny\"\nn_layer = 1\nd_model = 32\nd_ff = 128\nmax_seq_len = 32\n"
        << "[train]\nbatch_size = 8\nseq_len = 32\neval_every = 0\nlog_every = 100000\n"
        << "[sample]\ntokens = 0\n[runtime]\npeak_gflops = 100\nthreads = 1\n"
        << "[data]\ntrain = \"" << dir_.file("train.bin") << "\"\n";
  }
  // The run in the background; `signal` sent once `ready` (a shell test) holds; then
  // waited for, and its exit code printed last ("exit=N").
  testing::CommandResult signalled(const std::string& args, const std::string& ready, const std::string& signal) {
    const std::string run = std::string(NDT_BINARY_DIR) + "/ndtrain train " + dir_.file("run.toml") + " " + args;
    return testing::run_command("bash -c '" + run + " & pid=$!; for i in $(seq 600); do " + ready +
                                " && break; sleep 0.05; done; kill -" + signal + " $pid; wait $pid; echo exit=$?'");
  }
  testing::TempDir dir_;
};

// Catches: Ctrl-C killing a one-process run without a save (SIGINT had no handler).
TEST_F(StopSignals, SigintSavesAndExits130) {
  const std::string out = dir_.file("int");
  const testing::CommandResult r =
      signalled("--set runtime.out_dir=" + out + " --set train.steps=1000000", "[ -s " + out + "/metrics.jsonl ]", "INT");
  ASSERT_NE(r.output.find("stop requested (SIGINT) after step "), std::string::npos) << r.output;
  const int64_t step = std::stoll(r.output.substr(r.output.find("stop requested (SIGINT) after step ") + 35));
  const fs::path saved = fs::path(out) / "checkpoints" / ckpt::checkpoint_dir_name(step);
  EXPECT_EQ(ckpt::latest_checkpoint(fs::path(out) / "checkpoints"), saved) << r.output;
  EXPECT_NE(r.output.find("stopped by SIGINT after step " + std::to_string(step)), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exit=130"), std::string::npos) << r.output;
}

// Catches: a SIGTERM during the final evaluation ignored until it ends, and the run then
// exiting 0 as if it had finished (a scheduler's grace period is short).
TEST_F(StopSignals, SigtermDuringTheFinalEvaluationEndsItAndExits143) {
  const std::string out = dir_.file("term");
  // Two steps, then a final evaluation of many batches; the signal once the final
  // checkpoint (written before the evaluation) is there.
  const fs::path final_checkpoint = fs::path(out) / "checkpoints" / ckpt::checkpoint_dir_name(2);
  const testing::CommandResult r = signalled(
      "--set runtime.out_dir=" + out + " --set train.steps=2 --set train.eval_batches=100000",
      "[ -d " + final_checkpoint.string() + " ]", "TERM");
  EXPECT_NE(r.output.find("stop requested (SIGTERM) during the final evaluation"), std::string::npos) << r.output;
  EXPECT_EQ(ckpt::latest_checkpoint(fs::path(out) / "checkpoints"), final_checkpoint) << r.output;
  EXPECT_NE(r.output.find("no validation (stopped)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stopped by SIGTERM after step 2 of 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exit=143"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ndt
