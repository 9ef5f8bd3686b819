// `plan --validate --rounds N`: how the rounds of one run become the table's row (the
// medians of the measured and predicted steps; every round's memory and bytes findings
// kept, each naming its round), and the rounds set against each other (the machine's
// repeatability). The runs themselves are test_plan_cli's.
#include "../common/errors.h"
#include "plan/planner.h"
#include "plan/validation.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace ndt {
namespace {

ValidationRow round_of(const std::string& name, double measured_s, double predicted_s) {
  ValidationRow row;
  row.name = name;
  row.step_s[0] = measured_s, row.step_s[1] = predicted_s;
  return row;
}

bool any_contains(const std::vector<std::string>& lines, const std::string& part) {
  for (const std::string& line : lines) {
    if (line.find(part) != std::string::npos) return true;
  }
  return false;
}

// Catches: a merge that takes the first round, or the means (one slow round would fail
// the run), instead of the medians.
TEST(ValidationRounds, StepTimeIsTheMedianOfTheRoundsAgainstTheMedianPrediction) {
  const std::vector<ValidationRow> rounds = {round_of("r", 0.20, 0.110), round_of("r", 0.12, 0.120),
                                             round_of("r", 0.11, 0.115)};
  const ValidationRow row = merge_validation_rounds(rounds, 0.2);
  EXPECT_DOUBLE_EQ(row.step_s[0], 0.12);
  EXPECT_DOUBLE_EQ(row.step_s[1], 0.115);
  EXPECT_TRUE(row.mismatches.empty()) << row.mismatches.front();
  // The first round alone is 82% off: its own row fails, naming no round.
  const ValidationRow first = merge_validation_rounds({rounds.front()}, 0.2);
  ASSERT_EQ(first.mismatches.size(), 1u);
  EXPECT_EQ(first.mismatches.front(), "step time: measured 0.2000 s, predicted 0.1100 s (+81.8%, the bound 20%)");
  // An even count takes the mean of the middle two.
  const ValidationRow two = merge_validation_rounds({round_of("r", 0.1, 0.1), round_of("r", 0.2, 0.3)}, 0.2);
  EXPECT_DOUBLE_EQ(two.step_s[0], 0.15);
  EXPECT_DOUBLE_EQ(two.step_s[1], 0.2);
  ASSERT_EQ(two.mismatches.size(), 1u);
  EXPECT_TRUE(any_contains(two.mismatches, "(-25.0%, the bound 20%; medians of 2 rounds)")) << two.mismatches.front();
}

// Catches: a kernel class counted to the wrong part or not at all (the parts must add up
// to the profile), barrier waits left out of communication, and a key the mapping does
// not know passed over silently (a class added to the kernels and not here).
TEST(ValidationParts, ProfileKeysAddUpToTheirParts) {
  const nlohmann::json profile = {{"gemm_fp32", 0.5},   {"gemm_16bit", 0.25}, {"gemm_fp8", 0.125},  {"attention", 0.1},
                                  {"cross_entropy", 1}, {"norm", 2},          {"elementwise", 4},   {"cast", 8},
                                  {"moe_routing", 16},  {"optimizer", 0.3},   {"communication", 32}, {"rank_wait", 64},
                                  {"unaccounted", 0.7},  {"rank", 3},         {"step_s", 1000}};
  const StepParts parts = measured_step_parts(profile);  // whose step and its length: no part
  EXPECT_DOUBLE_EQ(parts[static_cast<size_t>(StepPart::matmuls)], 0.875);
  EXPECT_DOUBLE_EQ(parts[static_cast<size_t>(StepPart::attention)], 0.1);
  EXPECT_DOUBLE_EQ(parts[static_cast<size_t>(StepPart::other_kernels)], 31);
  EXPECT_DOUBLE_EQ(parts[static_cast<size_t>(StepPart::optimizer)], 0.3);
  EXPECT_DOUBLE_EQ(parts[static_cast<size_t>(StepPart::communication)], 96);
  EXPECT_DOUBLE_EQ(parts[static_cast<size_t>(StepPart::unaccounted)], 0.7);
  testing::expect_error([] { measured_step_parts({{"gemm", 1.0}}); },
                        {"a step profile's key gemm is not a kernel class, communication or the rest"});
}

// Catches: a term of the model set against the wrong part, ZeRO's once-a-step copies
// counted with the optimizer (they are elementwise kernels), the bubble or the offload
// wait left out of communication.
TEST(ValidationParts, PredictionsPartsAreTheModelsTerms) {
  TimeEstimate t;
  t.matmul_s = 1, t.attention_s = 2, t.memory_s = 4, t.step_copies_s = 8, t.optimizer_s = 24;
  t.exposed_comm_s = 32, t.bubble_s = 64, t.offload_io_s = 128;
  const StepParts parts = predicted_step_parts(t);
  EXPECT_EQ(parts, (StepParts{1, 2, 12, 16, 224, 0}));
}

// Catches: the parts of a merged row taken from one round instead of each part's median.
TEST(ValidationRounds, EachPartIsTheMedianOfTheRounds) {
  std::vector<ValidationRow> rounds = {round_of("r", 0.1, 0.1), round_of("r", 0.1, 0.1), round_of("r", 0.1, 0.1)};
  rounds[0].parts[0] = {3, 1, 0, 0, 0, 9}, rounds[1].parts[0] = {1, 2, 0, 0, 0, 7}, rounds[2].parts[0] = {2, 3, 0, 0, 0, 8};
  rounds[0].parts[1] = {5, 0, 0, 0, 0, 0}, rounds[1].parts[1] = {4, 0, 0, 0, 0, 0}, rounds[2].parts[1] = {6, 0, 0, 0, 0, 0};
  const ValidationRow row = merge_validation_rounds(rounds, 0.2);
  EXPECT_EQ(row.parts[0], (StepParts{2, 2, 0, 0, 0, 8}));
  EXPECT_EQ(row.parts[1], (StepParts{5, 0, 0, 0, 0, 0}));
}

// Catches: a memory or bytes finding of a later round lost in the merge (memory and
// bytes are exact in every round, not on a median).
TEST(ValidationRounds, EveryRoundsMemoryAndBytesFindingsAreKeptWithTheirRound) {
  std::vector<ValidationRow> rounds = {round_of("r", 0.1, 0.1), round_of("r", 0.1, 0.1)};
  rounds[1].mismatches.push_back("model states: measured 10 bytes, predicted 20 (-50.0%)");
  rounds[0].notes.push_back("routing-dependent, not enforced: activations");
  const ValidationRow row = merge_validation_rounds(rounds, 0.2);
  ASSERT_EQ(row.mismatches.size(), 1u);
  EXPECT_EQ(row.mismatches.front(), "round 2: model states: measured 10 bytes, predicted 20 (-50.0%)");
  ASSERT_EQ(row.notes.size(), 1u);
  EXPECT_EQ(row.notes.front(), "round 1: routing-dependent, not enforced: activations");
}

// Catches: pairs counted one way only, a pair of a round with itself, or the largest
// difference credited to the wrong run.
TEST(ValidationRounds, RepeatabilitySetsEachRoundOfARunAgainstItsOthers) {
  const std::vector<std::vector<ValidationRow>> by_case = {
      {round_of("steady", 1.0, 9), round_of("steady", 1.1, 9)},
      {round_of("drifting", 1.0, 9), round_of("drifting", 1.5, 9)},
  };
  const Repeatability r = validation_repeatability(by_case, 0.2);
  EXPECT_EQ(r.pairs, 4);
  EXPECT_EQ(r.within, 2);  // 1.0 / 1.1 - 1 and 1.1 / 1.0 - 1; not 1.0 / 1.5 - 1 (-33%) or 1.5 / 1.0 - 1
  EXPECT_DOUBLE_EQ(r.largest, 0.5);
  EXPECT_EQ(r.largest_run, "drifting");
  EXPECT_NEAR(r.median, (0.1 + 1.0 / 3) / 2, 1e-12);
  const Repeatability single = validation_repeatability({{round_of("once", 1.0, 1.0)}}, 0.2);
  EXPECT_EQ(single.pairs, 0);
}

// Catches: the load factor's run figure read from the start-of-run peak alone (a moment's
// other work during that sample made a one-rank run's prediction 2x too slow), from the
// end alone, or as their mean; and a run without its run record passed over.
TEST(ValidationLoad, TheRunsFmaRateIsTheLargerOfItsStartAndEndPeaks) {
  const nlohmann::json run = nlohmann::json::parse(R"({"run": {"peak_flops": 100.0}})");
  const nlohmann::json step = nlohmann::json::parse(R"({"step": 1, "loss": 5.0, "step_s": 0.1})");
  const auto summary = [](const char* text) { return nlohmann::json{{"summary", nlohmann::json::parse(text)}}; };
  EXPECT_EQ(run_fma_flops({run, step, summary(R"({"peak_flops_at_end": 180.0})")}), 180.0);
  EXPECT_EQ(run_fma_flops({run, step, summary(R"({"peak_flops_at_end": 60.0})")}), 100.0);
  EXPECT_EQ(run_fma_flops({run, step, summary(R"({"peak_flops_at_end": null})")}), 100.0);
  EXPECT_EQ(run_fma_flops({run, step, summary(R"({"last_loss": 4.0})")}), 100.0);
  testing::expect_error([&] { run_fma_flops({step}); }, {"logged no run record with its peak_flops"});
}

}  // namespace
}  // namespace ndt
