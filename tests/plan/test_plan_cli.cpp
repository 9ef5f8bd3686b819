// `ndtrain plan` end to end: a search printed as a table and written as JSON and CSV,
// bad input refused by name, `--calibrate`, which measures this machine into a device
// file, and `--validate`, which trains small layouts on 1, 2 and 4 ranks under mpirun
// and holds the planner's memory (within 2%), bytes (exactly) and step time (within a
// bound, on calibrated profiles) to what the runs measure.
#include "../common/command.h"
#include "../common/temp_dir.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

namespace ndt {
namespace {

const std::string kNdtrain = std::string(NDT_BINARY_DIR) + "/ndtrain";

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Catches: a plan that prints no ranked layouts, or files that do not hold every layout.
TEST(PlanCli, PrintsTheBestLayoutsAndWritesTheWholeSearch) {
  testing::TempDir dir;
  const testing::CommandResult r = testing::run_command(
      kNdtrain + " plan --preset llama3-8b --device h100-sxm --nodes 2 --seq 4096 --batch 64 --precision bf16 --top 3 "
                 "--json " + dir.file("plan.json") + " --csv " + dir.file("plan.csv"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "candidate layouts on 2 x 8 h100-sxm (16 devices, 80.00 GiB each)")) << r.output;
  EXPECT_TRUE(contains(r.output, "\n1    ")) << r.output;
  EXPECT_TRUE(contains(r.output, "\nbest: ")) << r.output;
  EXPECT_TRUE(contains(r.output, "memory per device")) << r.output;
  std::ifstream json_file(dir.file("plan.json"));
  const nlohmann::json j = nlohmann::json::parse(json_file);
  EXPECT_EQ(j.at("layouts").size(), j.at("candidates").get<size_t>());
  EXPECT_TRUE(j.at("layouts").at(0).at("fits").get<bool>());
  std::ifstream csv_file(dir.file("plan.csv"));
  size_t lines = 0;
  for (std::string line; std::getline(csv_file, line);) ++lines;
  EXPECT_EQ(lines, j.at("candidates").get<size_t>() + 1);
}

// Catches: bad input accepted, or refused without naming it.
TEST(PlanCli, RefusesBadInputByName) {
  testing::CommandResult r = testing::run_command(kNdtrain + " plan --preset llama3-8b --device tpu-v9");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "--device \"tpu-v9\" is not a device profile")) << r.output;
  r = testing::run_command(kNdtrain + " plan --preset llama3-8b --nodes 2 --devices-per-node 8 --devices 12");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "contradictory cluster sizes")) << r.output;
  r = testing::run_command(kNdtrain + " plan --preset llama3-9b");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "model.preset = \"llama3-9b\" is not a known preset")) << r.output;
  r = testing::run_command(kNdtrain + " plan --preset llama3-8b --top 0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "--top 0 must be at least 1")) << r.output;
  r = testing::run_command(kNdtrain + " plan --preset llama3-8b --zero-stages 1,4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "--zero-stages: 4 is not a ZeRO stage (0 to 3)")) << r.output;
  r = testing::run_command(kNdtrain + " plan --preset llama-moe-tiny --device h100-sxm --expert-load 0.5");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "--expert-load 0.5 must be at least 1")) << r.output;
  r = testing::run_command(kNdtrain + " plan --device h100-sxm");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "needs a model: --preset NAME or --config FILE")) << r.output;
}

// The step-time bound CI enforces, looser than the 20% `--validate` aims at: CI's machine
// is another CPU with its own noise, and a prediction cannot beat a run's repeatability
// there. On the development VM, quiet (CI runs one test at a time), two validations of the
// tiny models (2026-12-07, Xeon without AMX) gave median |errors| of 9.5% and 9.2% and at
// most 27.6% and 22.4%; its rounds differed by up to 37.6%, and a run whose start-of-run
// FMA sample read half the calibration's was over-predicted by 25-39% (docs/planner.md).
// 100% holds that with room and catches a model off by a factor of 2 (a term counted
// twice, a calibration figure not read, a unit slip); the bytes and memory checks stay
// exact. (It was 300% while the model under-predicted every run by a median 49%.)
constexpr const char* kCiTimeBoundPercent = "100";

// Catches: a calibration that writes no device file or one the planner cannot read, and
// the planner's memory, bytes or step time drifting from what ndtrain measures on real
// runs (every layout of the validation set: memory within 2%, bytes equal, step time
// within the bound on the calibrated profiles), in each of two rounds (--rounds), whose
// medians are held to the bound and which are set against each other; a rank count
// without a device file calibrated once for both rounds; a path with a
// space or a quote split by the shell on its way to the runs.
TEST(PlanCli, CalibrateThenValidateHoldsThePlannerToRunsOnThisMachine) {
  testing::TempDir dir;
  // Paths with a space and a quote: the runs ndtrain starts through the shell get them whole.
  const std::string device = dir.file("cpu 2-ranks's.toml");
  const std::string runs = dir.file("validation runs");
  testing::CommandResult r = testing::run_command(kNdtrain + " plan --calibrate --ranks 2 --out \"" + device + "\"");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "calibrated in")) << r.output;
  EXPECT_TRUE(contains(r.output, "gemm_efficiencies = [")) << r.output;
  EXPECT_TRUE(contains(r.output, "intra_node_call_us = ")) << r.output;
  EXPECT_TRUE(contains(r.output, "oversubscription = ")) << r.output;
  EXPECT_TRUE(contains(r.output, "attention_seq_lens = [32, 64, 128, 256, 512]")) << r.output;
  for (const char* kind : {"all_reduce", "reduce_scatter", "all_gather", "all_to_all"}) {
    EXPECT_TRUE(contains(r.output, std::string(kind) + "_call_us = [")) << kind << "\n" << r.output;
  }
  EXPECT_TRUE(contains(r.output, "reduce_scatter_wire_bytes = [64, 4096, 65536, 524288, 4194304, 16777216]")) << r.output;
  r = testing::run_command(kNdtrain + " plan --validate --validate-models tiny --rounds 2 --device \"" + device +
                          "\" --validate-dir \"" + runs + "\" --time-bound " + kCiTimeBoundPercent);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "(medians of 2 rounds): 10 of 10 runs")) << r.output;
  EXPECT_TRUE(contains(r.output, "round 2 of 2")) << r.output;
  EXPECT_TRUE(contains(r.output, "another round in ")) << r.output;
  EXPECT_TRUE(contains(r.output, " of 20 pairs")) << r.output;
  EXPECT_TRUE(contains(r.output, "profile for 2 ranks: device file " + device)) << r.output;
  // The rank counts without a device file are calibrated again for each round; the given one is not.
  EXPECT_TRUE(contains(r.output, "cpu-4-ranks.toml\n")) << r.output;
  EXPECT_TRUE(contains(r.output, "cpu-4-ranks-round-2.toml\n")) << r.output;
  EXPECT_TRUE(contains(r.output, "profile for 4 ranks (the last round's): ")) << r.output;
  EXPECT_FALSE(contains(r.output, "calibrating the step-time model on 2 ranks")) << r.output;
  // Each run's step by parts (train.profile against the model's terms), and over the runs.
  EXPECT_TRUE(contains(r.output, "by part, measured / predicted s: matmuls ")) << r.output;
  EXPECT_TRUE(contains(r.output, "by part over the runs (measured against predicted): matmuls ")) << r.output;
  EXPECT_FALSE(contains(r.output, "MISMATCH")) << r.output;
  std::printf("%s", r.output.c_str());
}

// Catches: --calibrate's and --validate's options accepted where they do nothing, and a
// validation whose step-time bound cannot fail.
TEST(PlanCli, CalibrateAndValidateRefuseWhatTheyDoNotUse) {
  const std::pair<const char*, const char*> refusals[] = {
      {"--preset gpt2-tiny --out x.toml", "--out x.toml requires --calibrate"},
      {"--calibrate --preset gpt2-tiny", "--preset excludes --calibrate"},
      {"--time-bound 30", "--time-bound requires --validate"},
      {"--validate --time-bound 0", "--time-bound 0 must be a positive percentage"},
      {"--validate-models tiny", "--validate-models requires --validate"},
      {"--validate --validate-models huge", "--validate-models huge: expected small or tiny"},
      {"--rounds 2", "--rounds requires --validate"},
      {"--validate --rounds 0", "--rounds 0 must lie in [1, 10]"},
      {"--calibrate --ranks 2000", "--ranks 2000 must lie in [1, 1024]"},
  };
  for (const auto& [arguments, message] : refusals) {
    const testing::CommandResult r = testing::run_command(kNdtrain + " plan " + arguments);
    EXPECT_NE(r.exit_code, 0) << arguments;
    EXPECT_TRUE(contains(r.output, message)) << arguments << ": " << r.output;
  }
}

}  // namespace
}  // namespace ndt
