// The CLI under mpirun, end to end: a data-parallel run on 2 ranks trains and writes
// its metrics; a mesh that does not match the world ends at once with an error
// naming the sizes and a non-zero exit; a rank killed in the middle of an asynchronous
// checkpoint save leaves the previous checkpoint, from which the run resumes exactly;
// SIGTERM makes a run save and stop.
#include "../common/command.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "checkpoint/directory.h"
#include "checkpoint/writer.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>

namespace ndt {
namespace {

using Result = testing::CommandResult;
Result run(const std::string& command) { return testing::run_command(command); }

class TrainLaunch : public ::testing::Test {
 protected:
  TrainLaunch() {
    write_shard(dir_.file("train.bin"), testing::synthetic_text(40000, 5));
    std::ofstream(dir_.file("run.toml"))
        << "[model]\npreset = \"gpt2-tiny\"\nn_layer = 1\nd_model = 32\nd_ff = 128\nmax_seq_len = 32\n"
        << "[train]\nsteps = 6\nbatch_size = 8\nmicro_batch_size = 2\nseq_len = 32\neval_every = 3\neval_batches = 2\n"
        << "[sample]\ntokens = 20\n[runtime]\npeak_gflops = 100\ncomm_timeout_s = 60\n"
        << "[data]\ntrain = \"" << dir_.file("train.bin") << "\"\n";
  }
  // The same run as one process (one thread, for the same summation order in kernels).
  std::string one_rank(const std::string& args) const {
    return std::string(NDT_BINARY_DIR) + "/ndtrain train " + dir_.file("run.toml") + " --set runtime.threads=1 " + args;
  }
  std::string mpirun(int ranks, const std::string& args) const {
    return std::string(NDT_MPIRUN) + " -np " + std::to_string(ranks) +
           " --oversubscribe --bind-to none --allow-run-as-root -x OMP_NUM_THREADS=1 " + NDT_BINARY_DIR +
           "/ndtrain train " + dir_.file("run.toml") + " " + args;
  }
  testing::TempDir dir_;
};

// The loss of `step` (1-based) in a run's metrics file (the last record of it: a
// resumed run appends).
double loss_at(const std::string& metrics_path, int step) {
  std::ifstream in(metrics_path);
  double loss = -1;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record.contains("loss") && record.value("step", 0) == step) loss = record["loss"].get<double>();
  }
  return loss;
}

// The last validation loss in a run's metrics file.
double last_val_loss(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  double loss = -1;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record.contains("val_loss")) loss = record["val_loss"].get<double>();
  }
  return loss;
}

// The generated text the run printed after its "== sample" header.
std::string sample_of(const std::string& output) {
  const size_t header = output.find("== sample");
  if (header == std::string::npos) return "";
  return output.substr(output.find('\n', header) + 1);
}

// Catches a CLI run on several ranks that trains a different model than one rank would
// (wrong data split, wrong scale, wrong sampling under a mesh): its validation loss and
// its sample must be those of the one-rank run.
TEST_F(TrainLaunch, DataParallelRunOnTwoRanks) {
  const Result r = run(mpirun(2, "--set runtime.out_dir=" + dir_.file("out")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Result single = run(one_rank("--set runtime.out_dir=" + dir_.file("single")));
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const double val = last_val_loss(dir_.file("out/metrics.jsonl"));
  EXPECT_NEAR(val, last_val_loss(dir_.file("single/metrics.jsonl")), 1e-5 * val);
  EXPECT_EQ(sample_of(r.output), sample_of(single.output));
  EXPECT_GE(sample_of(r.output).size(), 20u) << r.output;
  EXPECT_NE(r.output.find("dp_replicate=2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 data-parallel ranks x 2 micro-steps of 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("validation loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("== sample"), std::string::npos) << r.output;
  // Progress lines come from rank 0 only: one line per step.
  size_t lines = 0;
  for (size_t at = r.output.find("step "); at != std::string::npos; at = r.output.find("step ", at + 1)) {
    if (r.output.compare(at, 11, "step     1/") == 0) ++lines;
  }
  EXPECT_EQ(lines, 1u) << r.output;
  // Catches OpenBLAS left on kernels weaker than the CPU (Debian's 0.3.21 falls back to
  // Prescott on CPUs it does not know: 5x slower): ndtrain restarts with a better core.
  EXPECT_NE(r.output.find("matmuls: OpenBLAS "), std::string::npos) << r.output;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    EXPECT_EQ(r.output.find("Prescott kernels"), std::string::npos) << r.output;
  }
  // The run record opens the file (docs/report.md); the first step record has the dp traffic.
  std::ifstream metrics(dir_.file("out/metrics.jsonl"));
  std::string run, first;
  ASSERT_TRUE(std::getline(metrics, run)) << "no metrics file";
  EXPECT_EQ(run.rfind("{\"run\":", 0), 0u) << run;
  ASSERT_TRUE(std::getline(metrics, first)) << "no step record";
  EXPECT_NE(first.find("\"all_reduce\""), std::string::npos) << first;
}

// Catches: `--layout auto` not choosing before the run, a choice not printed, a micro-batch
// the config gives not kept, or the measured-against-predicted check missing from the
// output or the metrics.
TEST_F(TrainLaunch, AutoLayoutOnTwoRanksPrintsTheChoiceAndChecksIt) {
  const Result r = run(mpirun(2, "--layout auto --set parallel.layout_check_steps=3 --set runtime.out_dir=" +
                                     dir_.file("auto")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* part : {"parallel.layout = \"auto\": ", " candidate layouts of 2 devices", "chosen:    ",
                           "runner-up: ", "kept as the config gives them: train.micro_batch_size = 2",
                           "layout check after step 4: ", "(median of 3)"}) {
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
  }
  std::ifstream metrics(dir_.file("auto/metrics.jsonl"));
  nlohmann::json check;
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record.contains("layout_check")) check = record["layout_check"];
  }
  ASSERT_TRUE(check.is_object()) << "no layout_check record";
  EXPECT_EQ(check["step"], 4);
  EXPECT_EQ(check["measured_steps"], 3);
  EXPECT_GT(check["predicted_step_s"].get<double>(), 0);
  EXPECT_GT(check["measured_step_s"].get<double>(), 0);
  EXPECT_NE(check["layout"].get<std::string>().find("mb2"), std::string::npos) << check.dump();
  EXPECT_NE(r.output.find("chosen:    " + check["layout"].get<std::string>() + ":"), std::string::npos) << r.output;
}

// Tensor parallel with sequence parallel through the CLI, to the end: validation and a
// sample (whose prompts of any length are padded to a multiple of tp).
TEST_F(TrainLaunch, TensorParallelRunSamplesText) {
  const Result r = run(mpirun(2, "--set parallel.tp=2 --set parallel.sequence_parallel=true --set runtime.out_dir=" +
                                     dir_.file("tp")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The one-rank run's validation loss and sample.
  const Result single = run(one_rank("--set runtime.out_dir=" + dir_.file("tp_single")));
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const double val = last_val_loss(dir_.file("tp/metrics.jsonl"));
  EXPECT_NEAR(val, last_val_loss(dir_.file("tp_single/metrics.jsonl")), 1e-5 * val);
  EXPECT_EQ(sample_of(r.output), sample_of(single.output));
  EXPECT_NE(r.output.find("tensor parallel: 2 ranks, each 2 of 4 heads"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("sequence parallel on"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("communication on tp"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("== sample"), std::string::npos) << r.output;
}

TEST_F(TrainLaunch, MeshThatDoesNotMatchTheWorldIsRefused) {
  const Result r = run(mpirun(2, "--set parallel.dp_replicate=3"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("has 3 ranks but the job has 2"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 30.0);
}

TEST_F(TrainLaunch, BatchThatDoesNotSplitOverRanksIsRefused) {
  const Result r = run(mpirun(2, "--set train.batch_size=6"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("train.batch_size = 6 is not a multiple of train.micro_batch_size = 2 x data-parallel size 2"),
            std::string::npos)
      << r.output;
}

TEST_F(TrainLaunch, RankKilledDuringAsyncSaveLeavesThePreviousCheckpoint) {
  auto args = [&](const std::string& out, int steps) {
    return "--set runtime.out_dir=" + dir_.file(out) + " --set checkpoint.every=2 --set train.eval_every=0" +
           " --set sample.tokens=0 --set optim.decay_steps=8 --set train.steps=" + std::to_string(steps);
  };
  const Result straight = run(mpirun(2, args("straight", 8)));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const Result first = run(mpirun(2, args("run", 4)));  // checkpoints at steps 2 (async) and 4 (on exit)
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // Resumed to step 8; every rank exits 4 KiB into its data file of the save at step 6.
  std::string crashing = mpirun(2, args("run", 8) + " --resume");
  crashing.replace(crashing.find(" -np "), 5, " -x NDT_CHECKPOINT_ABORT_AFTER_BYTES=4096 -np ");
  const Result crash = run(crashing);
  EXPECT_NE(crash.exit_code, 0) << crash.output;
  const std::filesystem::path root = dir_.file("run/checkpoints");
  EXPECT_TRUE(std::filesystem::exists(root / "step-00000006.tmp")) << crash.output;
  ASSERT_EQ(ckpt::latest_checkpoint(root), root / "step-00000004");

  const Result resumed = run(mpirun(2, args("run", 8) + " --resume"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + (root / "step-00000004").string() + " at step 4"), std::string::npos)
      << resumed.output;
  EXPECT_EQ(ckpt::latest_checkpoint(root), root / "step-00000008");
  EXPECT_FALSE(std::filesystem::exists(root / "step-00000006.tmp"));  // removed by the next save
  const double expected = loss_at(dir_.file("straight/metrics.jsonl"), 8);
  ASSERT_GT(expected, 0);
  EXPECT_EQ(loss_at(dir_.file("run/metrics.jsonl"), 8), expected);  // bit-identical: same mesh
}

// SIGTERM (as a scheduler sends before it kills a job): mpirun passes it to the ranks,
// which agree on it at the next step boundary, save a checkpoint and stop cleanly;
// the run resumes from that step.
TEST_F(TrainLaunch, SigtermSavesACheckpointAndStops) {
  const std::string out = dir_.file("term");
  const std::string args = "--set runtime.out_dir=" + out + " --set train.steps=1000000 --set train.eval_every=0" +
                           " --set train.log_every=100000 --set sample.tokens=0";
  // Signalled once training has begun (its first steps are in the metrics file).
  const Result r = run("bash -c '" + mpirun(2, args) + " & pid=$!; for i in $(seq 300); do [ -s " + out +
                       "/metrics.jsonl ] && break; sleep 0.1; done; sleep 1; kill -TERM $pid; wait $pid'");
  ASSERT_NE(r.output.find("stop requested (SIGTERM) after step "), std::string::npos) << r.output;
  const size_t at = r.output.find("stop requested (SIGTERM) after step ") + 36;
  const int64_t step = std::stoll(r.output.substr(at));
  const std::filesystem::path saved = std::filesystem::path(out) / "checkpoints" / ckpt::checkpoint_dir_name(step);
  EXPECT_EQ(ckpt::latest_checkpoint(std::filesystem::path(out) / "checkpoints"), saved) << r.output;
  EXPECT_NE(r.output.find("== summary =="), std::string::npos) << r.output;
  // Said at the end, and told apart from a finished run by the exit code (ranks exit 143).
  EXPECT_NE(r.output.find("stopped by SIGTERM after step " + std::to_string(step) + " of 1000000: the state is saved in " +
                          saved.string() + "; continue with --resume"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;

  // Forgetting --resume: refused on both ranks before step 1, the checkpoint kept.
  const Result fresh = run(mpirun(2, args + " --set train.steps=" + std::to_string(step + 2)));
  EXPECT_NE(fresh.exit_code, 0) << fresh.output;
  EXPECT_NE(fresh.output.find("of an earlier run (" + ckpt::checkpoint_dir_name(step) + "): continue it with --resume"),
            std::string::npos)
      << fresh.output;
  EXPECT_EQ(fresh.output.find("step     1/"), std::string::npos) << fresh.output;
  EXPECT_EQ(ckpt::latest_checkpoint(std::filesystem::path(out) / "checkpoints"), saved);

  const Result resumed = run(mpirun(2, args + " --set train.steps=" + std::to_string(step + 2) + " --resume"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step " + std::to_string(step)), std::string::npos) << resumed.output;
}

// Catches: a diverged job that trains on to exit 0 with NaN checkpoints: both ranks stop
// at the first non-finite step with a message, and the job's exit code says so.
TEST_F(TrainLaunch, DivergedRunStopsWithAnErrorOnTwoRanks) {
  const Result r = run(mpirun(2, "--set runtime.out_dir=" + dir_.file("diverged") +
                                     " --set optim.lr=1e6 --set optim.warmup_steps=0 --set optim.grad_clip=0"
                                     " --set train.steps=40 --set checkpoint.every=1"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("so training cannot go on; the update was not applied"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("== summary =="), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ndt
