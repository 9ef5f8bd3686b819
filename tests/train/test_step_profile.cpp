// `ndtrain bench train --profile` (train/step_profile.h, kernels/profile.h): the op
// classes, communication and the unaccounted rest make up the step, no time counted
// twice; GEMM time lands in the class of the dtype the step multiplies in; kernels
// marked by an outer scope count once, to it; the timers record nothing when off; the
// CLI prints the table and refuses a profile it cannot take by name; train.profile
// writes each step's into the metrics, in keys `plan --validate` reads.
#include "../common/command.h"
#include "../common/one_rank_mesh.h"
#include "../common/temp_dir.h"
#include "test_support.h"
#include "plan/validation.h"
#include "comm/communicator.h"
#include "kernels/kernels.h"
#include "optim/clip.h"
#include "train/step_profile.h"
#include "train/training_model.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

namespace ndt {
namespace {

using kernels::OpClass;

double of(const StepProfile& p, OpClass c) { return p.kernels[static_cast<size_t>(c)]; }

// gpt2-tiny, B=4, T=64, in `compute`, fp8 linears or not, on one rank.
RunConfig tiny_run(DType compute, bool fp8) {
  RunConfig run;
  run.model = ModelConfig::preset("gpt2-tiny");
  run.seed = 1;
  run.batch_size = 4;
  run.seq_len = 64;
  run.precision.compute = compute;
  run.precision.fp8 = fp8;
  return run.resolved(1);
}

// `steps` steps of tiny_run, each profiled.
std::vector<StepProfile> profiled_steps(int steps, DType compute, bool fp8 = false) {
  DeviceMesh& mesh = testing::one_rank_mesh();
  TrainingModel training(tiny_run(compute, fp8), mesh);
  const FetchRows rows = [](int row_begin, int n, int32_t* inputs, int32_t* targets) {
    for (int i = 0; i < n * 64; ++i) inputs[i] = (row_begin * 64 + i) * 7 % 256, targets[i] = (row_begin * 64 + i) * 11 % 256;
  };
  StepProfiler profiler(mesh);
  std::vector<StepProfile> profiles;
  for (int s = 0; s < steps; ++s) {
    profiler.begin();
    const auto t0 = std::chrono::steady_clock::now();
    training.compute_gradients(rows, 1.0f / (4 * 64));
    training.sync().step(1e-4f, clip_factor(training.sync().grad_norm(), 1.0f));
    profiles.push_back(profiler.end(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  }
  return profiles;
}

// Catches: a kernel timed twice (nested timers, or a class counted in two places), which
// makes the classes exceed the step; and GEMMs or other big kernels left out of the
// timers, which leaves most of the step unaccounted.
TEST(StepProfile, ClassesMakeUpTheStepWithoutCountingTwice) {
  for (const StepProfile& p : profiled_steps(3, DType::f32)) {
    double kernels = 0;
    for (size_t c = 0; c < kernels::kNumOpClasses; ++c) {
      EXPECT_GE(p.kernels[c], 0.0) << kernels::op_class_name(static_cast<OpClass>(c));
      kernels += p.kernels[c];
    }
    EXPECT_LE(kernels, p.step_seconds);
    EXPECT_GE(p.unaccounted(), 0.0);
    EXPECT_NEAR(kernels + p.communication + p.rank_wait + p.unaccounted(), p.step_seconds, 1e-12);
    // One rank: nothing is sent. The step is kernels for the most part.
    EXPECT_EQ(p.communication, 0.0);
    EXPECT_GT(kernels, 0.5 * p.step_seconds) << "unaccounted " << p.unaccounted() << " of " << p.step_seconds << " s";
    for (OpClass c : {OpClass::gemm_f32, OpClass::attention, OpClass::cross_entropy, OpClass::norm,
                      OpClass::elementwise, OpClass::optimizer}) {
      EXPECT_GT(of(p, c), 0.0) << kernels::op_class_name(c);
    }
  }
}

// Catches: low-precision GEMMs classed as fp32 (gemm_lowp matched by the "gemm" row), or
// an fp32 step reporting bf16 GEMM time.
TEST(StepProfile, GemmTimeIsClassedByTheDtypeItMultiplies) {
  for (const StepProfile& p : profiled_steps(1, DType::f32)) {
    EXPECT_GT(of(p, OpClass::gemm_f32), 0.0);
    EXPECT_EQ(of(p, OpClass::gemm_16bit), 0.0);
    EXPECT_EQ(of(p, OpClass::gemm_fp8), 0.0);
    EXPECT_EQ(of(p, OpClass::cast), 0.0);
  }
  for (const StepProfile& p : profiled_steps(1, DType::bf16)) {
    EXPECT_GT(of(p, OpClass::gemm_16bit), 0.0);
    EXPECT_GT(of(p, OpClass::cast), 0.0);
    EXPECT_EQ(of(p, OpClass::gemm_fp8), 0.0);
  }
  for (const StepProfile& p : profiled_steps(1, DType::bf16, true)) EXPECT_GT(of(p, OpClass::gemm_fp8), 0.0);
}

// Catches: the class table's first-match order broken (a 16-bit GEMM or a cross-entropy
// piece landing in another class).
TEST(StepProfile, KernelsAreClassedByName) {
  EXPECT_EQ(kernels::op_class_of("gemm"), OpClass::gemm_f32);
  EXPECT_EQ(kernels::op_class_of("linear_backward"), OpClass::gemm_f32);
  EXPECT_EQ(kernels::op_class_of("gemm_lowp"), OpClass::gemm_16bit);
  EXPECT_EQ(kernels::op_class_of("linear_forward_lowp"), OpClass::gemm_16bit);
  EXPECT_EQ(kernels::op_class_of("attention_span_backward_recompute"), OpClass::attention);
  EXPECT_EQ(kernels::op_class_of("cross_entropy_finish"), OpClass::cross_entropy);
  EXPECT_EQ(kernels::op_class_of("round_to_lowp"), OpClass::cast);
  EXPECT_EQ(kernels::op_class_of("lowp_gemm_backend"), OpClass::untimed);
  EXPECT_FALSE(kernels::op_class_of("no_such_kernel").has_value());
  EXPECT_EQ(kernels::gemm.op_class, OpClass::gemm_f32);
}

// Catches: a routed kernel inside a marked group counted to both classes, or the timers
// recording while off (the cost the profile must not add to ordinary runs).
TEST(StepProfile, AnOuterScopeTakesItsKernelsAndTimersOffRecordNothing) {
  const int n = 256;
  std::vector<float> a(n * n, 0.5f), c(n * n);
  auto gemm = [&] { kernels::gemm(false, true, n, n, n, 1.0f, a.data(), n, a.data(), n, 0.0f, c.data(), n); };
  const kernels::OpSeconds before = kernels::profile_seconds();
  gemm();
  EXPECT_EQ(kernels::profile_seconds(), before);
  kernels::set_profiling(true);
  {
    const kernels::ProfileScope scope(OpClass::gemm_fp8);
    gemm();
  }
  kernels::set_profiling(false);
  const kernels::OpSeconds after = kernels::profile_seconds();
  EXPECT_GT(after[static_cast<size_t>(OpClass::gemm_fp8)], before[static_cast<size_t>(OpClass::gemm_fp8)]);
  EXPECT_EQ(after[static_cast<size_t>(OpClass::gemm_f32)], before[static_cast<size_t>(OpClass::gemm_f32)]);
}

// Catches: the step's work outside the kernels left out of the timers: zeroing the
// gradients (a memset of all of them) and the clip's sum of squares over them took 5% of
// a gpt2-124m step that the table printed as unaccounted.
TEST(StepProfile, GradientZeroingAndTheGradientNormAreTimed) {
  TrainingModel training(tiny_run(DType::f32, false), testing::one_rank_mesh());
  const auto seconds = [](OpClass c) { return kernels::profile_seconds()[static_cast<size_t>(c)]; };
  kernels::set_profiling(true);
  const double elementwise = seconds(OpClass::elementwise), optimizer = seconds(OpClass::optimizer);
  training.sync().zero_grads();
  EXPECT_GT(seconds(OpClass::elementwise), elementwise);
  EXPECT_EQ(seconds(OpClass::optimizer), optimizer);
  EXPECT_EQ(training.sync().grad_norm(), 0.0);  // of the zeroed gradients
  EXPECT_GT(seconds(OpClass::optimizer), optimizer);
  kernels::set_profiling(false);
}

const std::string kNdtrain = std::string(NDT_BINARY_DIR) + "/ndtrain";

// Catches: the table's lines not adding up to the step it prints, or a class missing.
TEST(StepProfile, BenchTrainPrintsTheTable) {
  const testing::CommandResult r =
      testing::run_command(kNdtrain + " bench train --preset gpt2-tiny --batch 4 --seq 64 --steps 3 --profile");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  std::string line;
  double step = -1, sum = 0;
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.find("profile of the median step (") != std::string::npos) {
      step = std::stod(line.substr(line.find('(') + 1));
      continue;
    }
    if (step < 0 || line.find(" s ") == std::string::npos || line.back() != '%') continue;
    const size_t s = line.rfind(" s ");
    sum += std::stod(line.substr(line.rfind(' ', s - 1) + 1));
    ++rows;
  }
  EXPECT_EQ(rows, static_cast<int>(kernels::kNumOpClasses) - 1 + 3) << r.output;
  EXPECT_NEAR(sum, step, 0.0005 * rows) << r.output;
  for (const char* name : {"gemm fp32", "gemm bf16/f16", "gemm fp8", "attention", "cross-entropy", "norms",
                           "elementwise", "casts", "optimizer", "communication", "waiting for other ranks",
                           "unaccounted"}) {
    EXPECT_NE(r.output.find(name), std::string::npos) << name << "\n" << r.output;
  }
}

// Catches: --peak-each-step without a sample on each side of every counted step (3 steps,
// 4 samples: after the warm-up and after each).
TEST(StepProfile, BenchTrainSetsEachStepAgainstThePeakSampledBesideIt) {
  const testing::CommandResult r =
      testing::run_command(kNdtrain + " bench train --preset gpt2-tiny --batch 4 --seq 64 --steps 3 --peak-each-step");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find("MFU against the peak sampled beside each step: median ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
  const std::string steps = line.substr(line.find("(steps "), line.find(';') - line.find("(steps "));
  const std::string samples = line.substr(line.find("samples "));
  EXPECT_EQ(std::count(steps.begin(), steps.end(), '%'), 3) << line;
  EXPECT_EQ(std::count(samples.begin(), samples.end(), ','), 3) << line;
}

// Catches: a profile of one step presented as a median.
TEST(StepProfile, BenchTrainRefusesAProfileOfTooFewSteps) {
  const testing::CommandResult r =
      testing::run_command(kNdtrain + " bench train --preset gpt2-tiny --batch 4 --seq 64 --steps 2 --profile");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--profile needs --steps 3 or more (it reports the median step), got --steps 2"),
            std::string::npos)
      << r.output;
}

// Catches: a profile's communication without the time MPI spends driving non-blocking
// operations (their starts and polls, where Open MPI copies their data), which then shows
// as unaccounted; or with the barriers' waits (the slowest rank's, reported apart).
TEST(StepProfile, CommunicationIsTheWaitsAndTheProgressButNotTheBarriers) {
  CommStats stats;
  stats[CommOp::all_reduce].wait_seconds = 1, stats[CommOp::all_gather].progress_seconds = 2;
  stats[CommOp::reduce_scatter].wait_seconds = 8, stats[CommOp::reduce_scatter].progress_seconds = 16;
  stats[CommOp::barrier].wait_seconds = 4;
  EXPECT_DOUBLE_EQ(communication_seconds(stats), 27);
}

// The records of `steps` steps of the trainer tests' run, with train.profile as given.
std::vector<nlohmann::json> records_of_run(bool profile, int64_t steps) {
  testing::TempDir dir;
  RunConfig c = testing::small_run(testing::shared_shard(), steps);
  c.out_dir = dir.file("run");
  c.profile = profile;
  Trainer(c, testing::one_rank_mesh(), nullptr).run();
  std::ifstream in(c.out_dir + "/metrics.jsonl");
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

std::vector<nlohmann::json> step_records_of(const std::vector<nlohmann::json>& records) {
  std::vector<nlohmann::json> steps;
  for (const nlohmann::json& r : records) {
    if (r.contains("loss") && r.contains("step_s")) steps.push_back(r);
  }
  return steps;
}

const nlohmann::json& summary_of(const std::vector<nlohmann::json>& records) {
  for (const nlohmann::json& r : records) {
    if (r.contains("summary")) return r["summary"];
  }
  throw Error("the run wrote no summary record");
}

// Catches: train.profile not reaching the metrics, a step's profile that is not the
// step (parts missing or counted twice: they must add up to step_s), keys the
// validation's mapping does not know (it refuses them), the peak not measured again at
// the end (the validation's load factor reads it), and either written when off.
TEST(StepProfile, TrainProfileWritesEveryStepsClassesIntoTheMetrics) {
  const std::vector<nlohmann::json> all = records_of_run(true, 3);
  const nlohmann::json& at_end = summary_of(all).at("peak_flops_at_end");
  ASSERT_TRUE(at_end.is_number()) << summary_of(all).dump();
  EXPECT_GT(at_end.get<double>(), 0.0);
  const std::vector<nlohmann::json> records = step_records_of(all);
  ASSERT_EQ(records.size(), 3u);
  for (const nlohmann::json& r : records) {
    ASSERT_TRUE(r.contains("profile")) << r.dump();
    const nlohmann::json& p = r["profile"];
    EXPECT_GT(p.value("gemm_fp32", 0.0), 0.0) << p.dump();
    EXPECT_GT(p.value("attention", 0.0), 0.0) << p.dump();
    EXPECT_GT(p.value("optimizer", 0.0), 0.0) << p.dump();
    EXPECT_EQ(p.at("communication").get<double>(), 0.0);  // one rank
    const StepParts parts = measured_step_parts(p);
    double total = 0;
    for (double part : parts) total += part;
    const double step_s = r.at("step_s").get<double>();
    EXPECT_NEAR(total, step_s, 1e-9 * step_s) << p.dump();
    EXPECT_EQ(p.at("rank").get<int>(), 0);  // one rank: its own step
    EXPECT_EQ(p.at("step_s").get<double>(), step_s);
    EXPECT_EQ(parts[static_cast<size_t>(StepPart::matmuls)], p.at("gemm_fp32").get<double>());
  }
  const std::vector<nlohmann::json> off = records_of_run(false, 2);
  for (const nlohmann::json& r : step_records_of(off)) EXPECT_FALSE(r.contains("profile")) << r.dump();
  EXPECT_TRUE(summary_of(off).at("peak_flops_at_end").is_null());
}

}  // namespace
}  // namespace ndt
