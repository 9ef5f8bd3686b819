// The planner (plan/planner.h): its memory and bytes are the shared functions' (the
// feature matrix holds them to the ledger and the counters, tests/mpi); here the ZeRO
// paper's model-state table reproduced, published large runs compared with what the
// planner predicts (the error printed and bounded), the out-of-memory explanation, the
// device profiles and files, and every bad input against its message.
#include "../common/errors.h"
#include "../common/temp_dir.h"
#include "model/activations.h"
#include "model/transformer.h"
#include "parallel/memory_model.h"
#include "parallel/offload_model.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/tensor/tensor_parallel.h"
#include "plan/planner.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace ndt {
namespace {

constexpr double kGB = 1e9;

// Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
// Parameter Models", Figure 1: a 7.5B-parameter model on 64 devices with mixed-precision
// Adam (K = 12): 120 GB, 31.4 GB, 16.6 GB and 1.88 GB of model states per device for the
// baseline and stages 1, 2 and 3 (P_os, P_os+g, P_os+g+p).
// Catches: a stage sharding the wrong state, a shard over the wrong count.
TEST(PublishedFigures, ZeroPaperModelStatesPerDevice) {
  const int64_t psi = 7'500'000'000;
  const double published[4] = {120, 31.4, 16.6, 1.88};
  for (int stage = 0; stage <= 3; ++stage) {
    const double gb = static_cast<double>(model_states_from_count(psi, 64, stage, kZeroPaperStates).total()) / kGB;
    fmt::print("ZeRO paper, stage {}: {:.3f} GB (published {} GB); ndtrain's fp32 accounting {:.3f} GB\n", stage, gb,
               published[stage], static_cast<double>(model_states_from_count(psi, 64, stage).total()) / kGB);
    EXPECT_NEAR(gb / published[stage], 1.0, 0.01) << "stage " << stage;
  }
}

RunConfig run_of(const ModelConfig& model, int seq_len, int batch, const Layout& layout) {
  RunConfig c;
  c.model = model;
  c.seq_len = seq_len;
  c.batch_size = batch;
  c.precision.compute = DType::bf16;
  return layout.apply(c);
}

Layout layout_of(int pp, int dp_replicate, int dp_shard, int cp, int tp, int zero, const char* schedule, int v,
                 CheckpointMode recompute) {
  Layout l;
  l.mesh = MeshShape{pp, dp_replicate, dp_shard, cp, tp, 1};
  l.zero_stage = zero;
  l.sequence_parallel = tp > 1;
  l.micro_batch_size = 1;
  l.recompute = recompute;
  l.pp_schedule = pipeline_schedule_from_name(schedule);
  l.pp_virtual_stages = v;
  return l;
}

// Catches: a Seq1F1B layout scored as if its units were whole micro-batches (its
// activations overestimated k-fold) instead of refused by name.
TEST(PlannerInput, Seq1F1BIsRefusedByName) {
  ModelConfig m = ModelConfig::preset("gpt2-124m");
  RunConfig c = run_of(m, 1024, 64, layout_of(2, 1, 1, 1, 1, 0, "seq1f1b", 1, CheckpointMode::none));
  c.precision.compute = DType::f32;
  c.pp_seq_chunks = 2;
  const Cluster cluster = make_cluster(builtin_device("a100-80g"), 0, 2, 2);
  try {
    score_layout(c, cluster);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.pp_schedule = \"seq1f1b\" (parallel.pp_seq_chunks = 2)"),
              std::string::npos)
        << e.what();
  }
}

// A published run's throughput against the planner's: the fastest layout that fits among
// `layouts` (the published layout with what the source leaves open varied).
struct PublishedRun {
  const char* source;  // where the figure is published
  const char* what;    // model, devices, layout
  double tokens_per_s_per_device;
};

LayoutScore fastest_fitting(const std::vector<RunConfig>& runs, const Cluster& cluster) {
  std::optional<LayoutScore> best;
  std::string why;
  for (const RunConfig& c : runs) {
    LayoutScore s = score_layout(c, cluster);
    why = s.layout.describe() + ": " + s.rejected;
    if (s.rejected.empty() && (!best || s.time.step_s < best->time.step_s)) best = std::move(s);
  }
  NDT_CHECK(best.has_value(), "no layout of the published run fits; the last: {}", why);
  return *best;
}

// Tokens per second per device predicted against published: the ratio of the two is the
// ratio of MFUs under any one FLOP count (the sources count FLOPs differently: torchtitan
// and Megatron count attention, llm.c 6N plus attention), so the error is the MFU's.
double throughput_error(const PublishedRun& run, const LayoutScore& s, const Cluster& cluster) {
  const double predicted = s.tokens_per_s / cluster.devices();
  const double error = predicted / run.tokens_per_s_per_device - 1;
  fmt::print("{} ({}): predicted {:.0f} tokens/s per device, MFU {:.1f}% ({}), published {:.0f}; error {:+.1f}%; "
             "step {:.2f} s (compute {:.2f}, exposed communication {:.2f}, optimizer {:.3f}), bubble {:.1f}%\n",
             run.what, run.source, predicted, 100 * s.mfu, s.layout.describe(), run.tokens_per_s_per_device,
             100 * error, s.time.step_s, s.time.compute_s, s.time.exposed_comm_s, s.time.optimizer_s, 100 * s.bubble);
  return error;
}

std::vector<RunConfig> with_open_choices(const ModelConfig& m, int seq, int batch, Layout l, std::vector<int> zeros,
                                         std::vector<CheckpointMode> recomputes, bool fp8 = false) {
  std::vector<RunConfig> runs;
  for (int zero : zeros) {
    for (CheckpointMode r : recomputes) {
      l.zero_stage = zero, l.recompute = r;
      RunConfig c = run_of(m, seq, batch, l);
      c.precision.fp8 = fp8;
      runs.push_back(c);
    }
  }
  return runs;
}

// Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
// Using Megatron-LM", Table 1, the 145.6B row: GPT, 80 layers, hidden 12288, 96 heads,
// vocabulary 51200, sequence 2048, batch 2304, tp 8 x pp 8 on 1536 A100-80GB (Selene):
// 148 TFLOP/s per GPU, 47% of peak, counting the recomputed forward (every model there
// recomputes its activations): the planner's HFU. Assumed where the row is silent:
// micro-batch 1, 1F1B, data parallelism without ZeRO.
// Catches: a step-time model off by a wide margin on a tp x pp x dp run.
TEST(PublishedFigures, MegatronTable1Row) {
  ModelConfig m = ModelConfig::preset("gpt2-124m");
  m.vocab_size = 51200, m.max_seq_len = 2048, m.n_layer = 80, m.d_model = 12288, m.n_head = 96, m.n_kv_head = 96;
  m.d_ff = 4 * m.d_model;
  const Cluster cluster = make_cluster(builtin_device("a100-80g"), 0, 8, 1536);
  RunConfig c = run_of(m, 2048, 2304, layout_of(8, 24, 1, 1, 8, 0, "1f1b", 1, CheckpointMode::full));
  const LayoutScore s = score_layout(c, cluster);
  ASSERT_TRUE(s.rejected.empty()) << s.rejected;
  const double published = 0.47, error = s.hfu / published - 1;
  fmt::print("Megatron-LM 145.6B on 1536 A100: predicted HFU {:.1f}% ({:.0f} TFLOP/s per GPU), published 47% (148); "
             "error {:+.1f}%; step {:.2f} s, bubble {:.1f}%\n",
             100 * s.hfu, s.hfu * 312, 100 * error, s.time.step_s, 100 * s.bubble);
  EXPECT_LT(std::abs(error), 0.35);
}

// Llama Team 2024, "The Llama 3 Herd of Models", Table 4: the 405B model on H100s, tp 8 x
// pp 16 with dp 64 (8192 GPUs, 32 sequences of 8192 per data-parallel rank): 430 TFLOP/s
// per GPU, 43% BF16 MFU; dp 128 (16384 GPUs, 16 per rank): 400, 41%; cp 16 x dp 8 (16384
// GPUs, sequences of 131072, 16 per rank): 380, 38%. 16M tokens per step in each. What
// the table leaves open (ZeRO stage, schedule, recompute; micro-batch 1) is the planner's
// choice: the fastest of those that fit. cp runs as a ring.
// Catches: a step-time model off by a wide margin at 16K devices.
TEST(PublishedFigures, Llama3Table4Rows) {
  const ModelConfig m = ModelConfig::preset("llama3-405b");
  struct Row {
    int devices, dp, cp, seq, batch;
    double mfu;
  };
  for (const Row& row : {Row{8192, 64, 1, 8192, 2048, 0.43}, Row{16384, 128, 1, 8192, 2048, 0.41},
                         Row{16384, 8, 16, 131072, 128, 0.38}}) {
    const Cluster cluster = make_cluster(builtin_device("h100-sxm"), 0, 8, row.devices);
    std::vector<RunConfig> runs;
    for (const auto& [schedule, v] : {std::pair{"1f1b", 1}, {"interleaved_1f1b", 2}}) {
      const auto choices = with_open_choices(m, row.seq, row.batch, layout_of(16, 1, row.dp, row.cp, 8, 1, schedule, v,
                                                                               CheckpointMode::none),
                                             {1, 2, 3}, {CheckpointMode::none, CheckpointMode::selective,
                                                         CheckpointMode::full});
      runs.insert(runs.end(), choices.begin(), choices.end());
    }
    const LayoutScore s = fastest_fitting(runs, cluster);
    const double error = s.mfu / row.mfu - 1;
    fmt::print("Llama 3 405B on {} H100 ({}): predicted MFU {:.1f}% ({:.0f} TFLOP/s per GPU), published {:.0f}%; error "
               "{:+.1f}%; step {:.2f} s, bubble {:.1f}%, memory {:.1f} GiB\n",
               row.devices, s.layout.describe(), 100 * s.mfu, s.mfu * 989, 100 * row.mfu, 100 * error, s.time.step_s,
               100 * s.bubble, static_cast<double>(s.memory.total()) / (1 << 30));
    EXPECT_LT(std::abs(error), 0.35) << row.devices << " devices, cp " << row.cp;
  }
}

constexpr CheckpointMode kNone = CheckpointMode::none, kSelective = CheckpointMode::selective,
                         kFull = CheckpointMode::full;

// torchtitan, docs/performance.md, "Llama 3 performance numbers": Llama 3 8B and 70B with
// FSDP2 on 64 A100-80GB, local batch 1 (global 64), sequence 8192, bf16: 8B with selective
// (op) recompute 2973 tokens/s per GPU (58.2% MFU by torchtitan's count), 70B with full
// recompute 331 (51.7%).
// Catches: FSDP's gathers and reduce-scatters priced as exposed on a GPU that overlaps them,
// or the activation traffic of long sequences priced as if it were not fused.
TEST(PublishedFigures, TorchtitanLlama3OnA100) {
  const Cluster cluster = make_cluster(builtin_device("a100-80g"), 0, 8, 64);
  const PublishedRun runs[] = {
      {"torchtitan docs/performance.md", "Llama 3 8B, FSDP 64 A100, selective recompute", 2973},
      {"torchtitan docs/performance.md", "Llama 3 70B, FSDP 64 A100, full recompute", 331}};
  const char* presets[] = {"llama3-8b", "llama3-70b"};
  const CheckpointMode recompute[] = {kSelective, kFull};
  for (int i = 0; i < 2; ++i) {
    const ModelConfig m = ModelConfig::preset(presets[i]);
    const auto choices = with_open_choices(m, 8192, 64, layout_of(1, 1, 64, 1, 1, 3, "1f1b", 1, kNone), {3}, {recompute[i]});
    EXPECT_LT(std::abs(throughput_error(runs[i], fastest_fitting(choices, cluster), cluster)), 0.35) << runs[i].what;
  }
}

// Megatron-Bridge, docs/performance-summary.md, 25.11 NeMo container, DGX-H100, FP8
// (current scaling), sequence 8192, micro-batch 1: Llama 3 8B on 8 GPUs, global batch 128,
// FSDP: 14451 tokens/s per GPU; Llama 3 70B on 64, global batch 128, tp 4 x pp 8 with 5
// virtual stages: 1602; Llama 3.1 405B on 1024, global batch 512, tp 8 x pp 8 x cp 2 with
// 8 virtual stages: 292. Megatron shards the optimizer (ZeRO-1) and keeps bf16 parameters;
// ndtrain keeps fp32 master parameters and gradients, so at 70B and 405B ZeRO-1 does not fit
// its memory there: the ZeRO stage, like the recompute policy the table leaves open, is the
// fastest that fits.
// Catches: the fp8 step, interleaving with many virtual stages, cp on a 3D layout.
TEST(PublishedFigures, MegatronBridgeLlama3OnH100Fp8) {
  const PublishedRun runs[] = {
      {"Megatron-Bridge performance-summary, 25.11, DGX-H100", "Llama 3 8B fp8, FSDP 8 H100", 14451},
      {"Megatron-Bridge performance-summary, 25.11, DGX-H100", "Llama 3 70B fp8, tp4 pp8 v5 on 64 H100", 1602},
      {"Megatron-Bridge performance-summary, 25.11, DGX-H100", "Llama 3.1 405B fp8, tp8 pp8 cp2 v8 on 1024 H100", 292}};
  struct Shape {
    const char* preset;
    int devices, batch, pp, dp, cp, tp, v;
    std::vector<int> zeros;
  };
  const Shape shapes[] = {{"llama3-8b", 8, 128, 1, 8, 1, 1, 1, {3}},
                          {"llama3-70b", 64, 128, 8, 2, 1, 4, 5, {1, 2, 3}},
                          {"llama3-405b", 1024, 512, 8, 8, 2, 8, 8, {1, 2, 3}}};
  for (int i = 0; i < 3; ++i) {
    const Shape& sh = shapes[i];
    const Cluster cluster = make_cluster(builtin_device("h100-sxm"), 0, 8, sh.devices);
    const Layout l = layout_of(sh.pp, 1, sh.dp, sh.cp, sh.tp, 1, sh.v > 1 ? "interleaved_1f1b" : "1f1b", sh.v, kNone);
    const auto choices = with_open_choices(ModelConfig::preset(sh.preset), 8192, sh.batch, l, sh.zeros,
                                           {kNone, kSelective, kFull}, /*fp8=*/true);
    EXPECT_LT(std::abs(throughput_error(runs[i], fastest_fitting(choices, cluster), cluster)), 0.35) << runs[i].what;
  }
}

// llm.c, "Reproducing GPT-2 (124M) in llm.c in 90 minutes for $20" (karpathy/llm.c
// discussion 481): GPT-2 124M on one 8x A100 80GB SXM node, 10B tokens in about 90
// minutes, batch 64 x 1024 per GPU (524288 tokens per step), bf16, ZeRO-1: about
// 1.85M tokens/s, 231000 per GPU (a rounded time, so the figure is good to a few percent).
// Catches: a small model's step, where norms, the optimizer and the 50257-way head weigh
// most, priced as if only its matmuls counted.
TEST(PublishedFigures, LlmcGpt2On8A100) {
  const Cluster cluster = make_cluster(builtin_device("a100-80g"), 1, 8, 0);
  const PublishedRun run{"llm.c discussion 481", "GPT-2 124M, ZeRO-1 8 A100", 231000};
  ModelConfig m = ModelConfig::preset("gpt2-124m");
  m.vocab_size = 50304;  // llm.c pads the vocabulary
  Layout l = layout_of(1, 1, 8, 1, 1, 1, "1f1b", 1, kNone);
  l.micro_batch_size = 64;
  const auto choices = with_open_choices(m, 1024, 512, l, {1}, {kNone});
  EXPECT_LT(std::abs(throughput_error(run, fastest_fitting(choices, cluster), cluster)), 0.35);
}

// Catches: predictions of the planner's own instead of the shared functions' (the feature
// matrix then holds those to the ledger and the counters on real runs).
TEST(Planner, PredictionsAreTheSharedFunctions) {
  ModelConfig m = ModelConfig::preset("llama-tiny");
  m.n_layer = 6;
  const Cluster cluster = make_cluster(builtin_device("h100-sxm"), 1, 8, 0);
  for (const Layout& l : {layout_of(1, 2, 4, 1, 1, 3, "1f1b", 1, CheckpointMode::none),
                          layout_of(2, 1, 2, 1, 2, 1, "1f1b", 1, CheckpointMode::selective),
                          layout_of(2, 1, 1, 2, 2, 0, "gpipe", 1, CheckpointMode::full),
                          layout_of(2, 1, 4, 1, 1, 1, "interleaved_1f1b", 2, CheckpointMode::none),
                          layout_of(2, 1, 2, 1, 2, 1, "zb_h1", 1, CheckpointMode::selective)}) {
    const RunConfig c = run_of(m, 64, 16, l);
    const LayoutScore s = score_layout(c, cluster);
    ASSERT_TRUE(s.rejected.empty()) << l.describe() << ": " << s.rejected;
    const PipelineStages stages = partition_pipeline(m, c.seq_len, l.mesh.pp * l.pp_virtual_stages);
    const PipelineShape shape = pipeline_shape(l.pp_schedule, l.mesh.pp, l.pp_virtual_stages,
                                               c.batch_size / l.mesh.size(Axis::dp) / l.micro_batch_size);
    for (int stage = 0; stage < l.mesh.pp; ++stage) {
      const std::vector<char> units = l.mesh.pp > 1 ? stages.local_units(stage, shape) : std::vector<char>{};
      std::vector<ParameterSpec> specs;
      for (const ParameterSpec& spec : model_parameter_specs(m)) {
        if (units.empty() || units[static_cast<size_t>(spec.unit)]) specs.push_back(spec);
      }
      const ModelStateBytes states = predict_model_states(local_parameter_specs(specs, l.mesh.tp),
                                                          l.mesh.size(Axis::dp_shard_cp), l.zero_stage, DType::bf16);
      const MemoryEstimate& got = s.stages[static_cast<size_t>(stage)];
      EXPECT_EQ(got.params, states.params) << l.describe() << " stage " << stage;
      EXPECT_EQ(got.grads, states.grads);
      EXPECT_EQ(got.optimizer, states.optimizer);
      ActivationLayout layout{l.mesh.tp, l.sequence_parallel, CpLayout{l.mesh.cp, CpMode::ring, CpChunks::zigzag}};
      const int64_t context = Transformer::predict_activation_bytes(m, 1, c.seq_len, c.loss_chunk_rows, layout,
                                                                    c.activation_checkpointing, units, DType::bf16);
      const int64_t workspace =
          workspace_floats(m, layout, 1, c.seq_len / l.mesh.cp, c.loss_chunk_rows, c.activation_checkpointing, DType::bf16) * 4;
      // The contexts the runner holds, interleaved or not (tests/mpi/test_pipeline.cpp
      // holds the runner's ledger to the same rule), and with a split backward the pending
      // weight halves' copies (tests/mpi/test_zero_bubble.cpp).
      const int contexts = l.mesh.pp > 1 ? peak_live_contexts(pipeline_actions(
                                               l.pp_schedule, shape, stage))
                                         : 1;
      const int pending = l.mesh.pp > 1 ? peak_deferred_weight_halves(pipeline_actions(l.pp_schedule, shape, stage)) : 0;
      const int64_t deferred = deferred_weight_bytes(m, layout, 1, c.seq_len / l.mesh.cp, c.activation_checkpointing,
                                                     units, DType::bf16);
      EXPECT_EQ(got.activations, got.in_flight * (context - workspace) + workspace + pending * deferred)
          << l.describe() << " stage " << stage;
      if (l.pp_schedule == PipelineSchedule::zb_h1) {
        EXPECT_EQ(pending, stage == 1 ? 2 : 0);
      }
      EXPECT_EQ(got.in_flight, contexts) << l.describe() << " stage " << stage;
      EXPECT_EQ(got.comm_buffers, predict_comm_buffer_bytes(c, cluster.devices(), stage));
    }
    const StepCommunication comm = predict_step_communication(c, cluster.devices(), s.worst_stage);
    for (size_t a = 0; a < kNumAxes; ++a) {
      EXPECT_EQ(s.comm[a].calls, comm.axes[a].calls()) << axis_name(static_cast<Axis>(a));
      EXPECT_EQ(s.comm[a].wire_bytes, comm.axes[a].wire_bytes()) << axis_name(static_cast<Axis>(a));
    }
    // MFU counts the model's FLOPs per token, as the trainer does; HFU adds what the
    // trainer's model recomputes in bf16 (the attention scores, and the checkpointing's).
    Transformer model(m, 1, 256, false);
    model.set_precision({DType::bf16, false, {}});
    model.set_activation_checkpointing(c.activation_checkpointing);
    const double flops = model.flops_per_token(c.seq_len) * c.batch_size * c.seq_len;
    EXPECT_NEAR(s.mfu, flops / (s.time.step_s * cluster.devices() * cluster.device.peak_bf16), 1e-12);
    const double recomputed = model.recompute_flops_per_token(c.seq_len) / model.flops_per_token(c.seq_len);
    EXPECT_NEAR(s.hfu, s.mfu * (1 + recomputed), 1e-12) << l.describe();
  }
}

// Catches: an out-of-memory rejection that does not say what overflows or by how much.
TEST(Planner, OutOfMemorySaysWhichPartOverflowsAndByHowMuch) {
  const Cluster cluster = make_cluster(builtin_device("a100-80g"), 1, 8, 0);
  RunConfig c = run_of(ModelConfig::preset("llama3-70b"), 4096, 8, layout_of(1, 8, 1, 1, 1, 0, "1f1b", 1, CheckpointMode::none));
  const LayoutScore s = score_layout(c, cluster);
  // DDP keeps every state whole: 70.6B parameters x (4 + 2) bytes alone are 395 GiB.
  EXPECT_GT(s.memory.params, int64_t{390} << 30);
  const double over = (static_cast<double>(s.memory.total()) - cluster.device.memory_bytes) / (1 << 30);
  EXPECT_NE(s.rejected.find("out of memory"), std::string::npos) << s.rejected;
  EXPECT_NE(s.rejected.find(fmt::format("{:.2f} GiB over the device's 80.00 GiB", over)), std::string::npos) << s.rejected;
  EXPECT_NE(s.rejected.find("the largest part, optimizer states"), std::string::npos) << s.rejected;

  // Nothing fits: the plan says so and shows the closest layout and why it overflows.
  RunConfig big;
  big.model = ModelConfig::preset("llama3-405b");
  big.seq_len = 8192, big.batch_size = 16, big.precision.compute = DType::bf16;
  PlanSpace space;
  space.micro_batch_sizes = {1};
  const PlanResult plan = plan_layouts(big, cluster, space);
  EXPECT_EQ(plan.fitting, 0);
  const std::string table = render_plan_table(plan, cluster, 5);
  EXPECT_NE(table.find("no layout fits in memory"), std::string::npos) << table;
  EXPECT_NE(table.find("closest to fitting of those out of memory"), std::string::npos) << table;
  EXPECT_NE(table.find("GiB over the device's 80.00 GiB"), std::string::npos) << table;
}

// Catches: a search that leaves out a valid layout or keeps an invalid one, or orders
// the fitting ones by anything but step time.
TEST(Planner, SearchesEveryMeshAndRanksByStepTime) {
  RunConfig base;
  base.model = ModelConfig::preset("llama-tiny");
  base.seq_len = 64, base.batch_size = 8;
  const Cluster cluster = make_cluster(builtin_device("h100-sxm"), 1, 4, 0);
  PlanSpace space;
  space.zero_stages = {0, 3};
  space.micro_batch_sizes = {1};
  space.recompute = {CheckpointMode::none};
  space.pp_schedules = {PipelineSchedule::one_f_one_b};
  space.cp_modes = {CpMode::ring};
  const PlanResult r = plan_layouts(base, cluster, space);
  EXPECT_EQ(r.candidates, r.fitting + r.out_of_memory + r.invalid);
  EXPECT_GT(r.fitting, 10);
  // Every mesh of 4 devices over (pp, dp_replicate, dp_shard, cp, tp) appears.
  int pure_tp = 0, pp_dp = 0;
  for (const LayoutScore& s : r.layouts) {
    pure_tp += s.layout.mesh.tp == 2 && s.layout.mesh.dp_replicate == 2 && s.rejected.empty();
    pp_dp += s.layout.mesh.pp == 2 && s.layout.mesh.dp_replicate == 2;
  }
  EXPECT_GT(pure_tp, 0);
  EXPECT_GT(pp_dp, 0);
  for (int i = 1; i < r.fitting; ++i) EXPECT_LE(r.layouts[i - 1].time.step_s, r.layouts[i].time.step_s);
  const nlohmann::json j = layout_json(r.layouts.front());
  EXPECT_TRUE(j.at("fits").get<bool>());
  EXPECT_EQ(j.at("memory_bytes").at("total").get<int64_t>(), r.layouts.front().memory.total());
  const std::string csv = plan_csv(r);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), r.candidates + 1);
}

// Catches: zero bubble left out of the search with recompute or low precision (which
// ndtrain once refused), or planned without the bytes its pending weight halves keep.
TEST(Planner, SearchesZeroBubbleWithRecomputeAndLowPrecision) {
  RunConfig base;
  base.model = ModelConfig::preset("llama-tiny");
  base.seq_len = 64, base.batch_size = 8;
  base.precision.compute = DType::bf16;
  const Cluster cluster = make_cluster(builtin_device("h100-sxm"), 1, 2, 0);
  PlanSpace space;
  space.zero_stages = {0};
  space.micro_batch_sizes = {1};
  space.recompute = {CheckpointMode::selective, CheckpointMode::full};
  space.pp_schedules = {PipelineSchedule::one_f_one_b, PipelineSchedule::zb_h1};
  space.cp_modes = {CpMode::ring};
  const PlanResult r = plan_layouts(base, cluster, space);
  std::map<std::pair<CheckpointMode, PipelineSchedule>, int64_t> last_stage_activations;
  for (const LayoutScore& s : r.layouts) {
    if (s.layout.mesh.pp != 2 || !s.rejected.empty()) continue;
    last_stage_activations[{s.layout.recompute, s.layout.pp_schedule}] = s.stages.back().activations;
  }
  for (CheckpointMode recompute : space.recompute) {
    ASSERT_TRUE(last_stage_activations.count({recompute, PipelineSchedule::zb_h1})) << checkpoint_mode_name(recompute);
    // The last stage keeps a context more (released after its weight half) and the
    // pending halves' copies.
    const int64_t zero_bubble = last_stage_activations[{recompute, PipelineSchedule::zb_h1}];
    EXPECT_GT(zero_bubble, (last_stage_activations[{recompute, PipelineSchedule::one_f_one_b}]));
  }
}

// USP in the search: on 8 devices every cp of 4 or 8 is tried with each cp_ulysses
// strictly between 1 and cp over which the heads split (llama-tiny: 4 heads, 2 KV heads:
// 2 only); its all-to-alls are counted on cp_ulysses, its ring sends on cp_ring (a ring of
// cp / cp_ulysses), nothing on cp; at cp = 8 USP's ring of 4 sends 10/22 of plain ring's bytes.
// Catches: USP missing from the search, a group size the checks refuse, its traffic on
// the wrong axis or with the ring's length taken as cp.
TEST(Planner, SearchesUspWithEachUlyssesGroupSize) {
  RunConfig base;
  base.model = ModelConfig::preset("llama-tiny");
  base.model.n_kv_head = 2;
  base.seq_len = 256, base.batch_size = 8;
  const Cluster cluster = make_cluster(builtin_device("h100-sxm"), 1, 8, 0);
  PlanSpace space;
  space.zero_stages = {0};
  space.micro_batch_sizes = {1};
  space.recompute = {CheckpointMode::none};
  space.pp_schedules = {PipelineSchedule::one_f_one_b};
  space.cp_modes = {CpMode::ring, CpMode::usp};
  const PlanResult r = plan_layouts(base, cluster, space);
  std::set<std::pair<int, int>> usp;  // (cp, cp_ulysses)
  const auto sent = [](const LayoutScore& s, Axis a) { return s.comm[static_cast<size_t>(a)].wire_bytes; };
  int64_t ring8 = 0, usp8 = 0;
  for (const LayoutScore& s : r.layouts) {
    const MeshShape& m = s.layout.mesh;
    if (!s.rejected.empty() || m.cp == 1 || m.pp > 1 || m.tp > 1) continue;
    if (s.layout.cp_mode == CpMode::ring) {
      EXPECT_EQ(m.cp_ulysses, 1);
      if (m.cp == 8) ring8 = sent(s, Axis::cp);
      continue;
    }
    usp.insert({m.cp, m.cp_ulysses});
    EXPECT_GT(s.comm[static_cast<size_t>(Axis::cp_ulysses)].calls, 0) << s.layout.describe();
    EXPECT_GT(sent(s, Axis::cp_ring), 0) << s.layout.describe();
    EXPECT_EQ(s.comm[static_cast<size_t>(Axis::cp)].calls, 0) << s.layout.describe();
    EXPECT_NE(s.layout.describe().find("usp (ulysses 2 x ring"), std::string::npos) << s.layout.describe();
    if (m.cp == 8) usp8 = sent(s, Axis::cp_ring);
  }
  EXPECT_EQ(usp, (std::set<std::pair<int, int>>{{4, 2}, {8, 2}}));
  ASSERT_GT(ring8, 0);
  // Per block: a ring of 4 sends 3 + 7 blocks of 2 N KD floats, one of 8 sends 7 + 15 of the same size.
  EXPECT_EQ(usp8 * 22, ring8 * 10);
}

// Catches: offload left out of the search on a device with a disk, planned on one without,
// or scored with memory or I/O of the planner's own instead of the offload model's.
TEST(Planner, OffloadLetsAModelTooLargeForMemoryFitAndCostsItsIo) {
  testing::TempDir dir;
  const std::string path = dir.file("small.toml");
  std::ofstream(path) << "name = \"small\"\nmemory_gib = 1.5\npeak_tflops_fp32 = 0.2\npeak_tflops_bf16 = 0.2\n"
                         "memory_bandwidth_gb_s = 10\nintra_node_gb_s = 5\ninter_node_gb_s = 5\ndevices_per_node = 1\n"
                         "disk_gb_s = 1\n";
  const Cluster cluster = make_cluster(resolve_device(path), 1, 1, 0);
  RunConfig base;
  base.model = ModelConfig::preset("llama-small");  // 125M parameters: 2 GB of fp32 states
  base.seq_len = 64, base.batch_size = 1;
  PlanSpace space;
  space.micro_batch_sizes = {1};
  space.recompute = {CheckpointMode::none};
  const PlanResult r = plan_layouts(base, cluster, space);
  ASSERT_GT(r.fitting, 0);
  for (int i = 0; i < r.fitting; ++i) {
    EXPECT_EQ(r.layouts[static_cast<size_t>(i)].layout.offload, OffloadChoice::params) << r.layouts[static_cast<size_t>(i)].layout.describe();
  }
  bool in_memory_rejected = false;
  for (const LayoutScore& s : r.layouts) in_memory_rejected |= s.layout.offload == OffloadChoice::none && !s.invalid;
  EXPECT_TRUE(in_memory_rejected) << "the in-memory layouts are scored (and overflow)";
  const LayoutScore& best = r.layouts.front();
  OffloadSettings o;
  o.optimizer = o.params = true;
  const TieredStates t = predict_tiered_states(model_parameter_specs(base.model), 1, best.layout.zero_stage, o);
  EXPECT_EQ(best.memory.params, t.peak.params);
  EXPECT_EQ(best.memory.grads, t.peak.grads);
  EXPECT_EQ(best.memory.optimizer, t.peak.optimizer);
  EXPECT_EQ(best.memory.disk, t.disk.total());
  // The stream is slower than the update at 1 GB/s: the step waits for the rest of it.
  const double stream_s = static_cast<double>(t.stream_bytes) / 1e9;
  EXPECT_GT(best.time.offload_io_s, 0.5 * stream_s);
  EXPECT_LE(best.time.offload_io_s, static_cast<double>(t.read_bytes + t.write_bytes) / 1e9);
  EXPECT_NE(best.layout.describe().find("| offload params"), std::string::npos);
  EXPECT_EQ(layout_json(best).at("offload"), "params");
  // A profile without a disk bandwidth plans in memory only.
  const PlanResult gpu = plan_layouts(base, make_cluster(builtin_device("h100-sxm"), 1, 1, 0), space);
  for (const LayoutScore& s : gpu.layouts) EXPECT_EQ(s.layout.offload, OffloadChoice::none);
}

TEST(Planner, DeviceFile) {
  testing::TempDir dir;
  const std::string path = dir.file("gpu.toml");
  std::ofstream(path) << "name = \"my-gpu\"\nmemory_gib = 96\npeak_tflops_fp32 = 60\npeak_tflops_bf16 = 800\n"
                         "memory_bandwidth_gb_s = 4000\nintra_node_gb_s = 400\ninter_node_gb_s = 50\n"
                         "devices_per_node = 4\ngemm_efficiency = 0.7\n";
  const DeviceProfile d = resolve_device(path);
  EXPECT_EQ(d.name, "my-gpu");
  EXPECT_DOUBLE_EQ(d.memory_bytes, 96.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(d.peak_bf16, 800e12);
  EXPECT_EQ(d.devices_per_node, 4);
  EXPECT_EQ(make_cluster(d, 3, 0, 0).devices(), 12);

  std::ofstream(dir.file("typo.toml")) << "memory_gb = 96\n";
  testing::expect_error([&] { resolve_device(dir.file("typo.toml")); }, {"unknown key \"memory_gb\""});
  std::ofstream(dir.file("short.toml")) << "memory_gib = 96\n";
  testing::expect_error([&] { resolve_device(dir.file("short.toml")); },
                        {"short.toml\" does not give inter_node_gb_s (required: memory_gib, peak_tflops_fp32"});
  testing::expect_error([&] { resolve_device(dir.file("missing.toml")); }, {"missing.toml"});
}

// Catches: a device file's value checked after scaling, under another key's name and in
// other units (memory_gib = -80 reported as "memory = -8.6e+10"), a huge one as "inf",
// and a bound that refuses its own edge or accepts the value past it.
TEST(Planner, DeviceFileValuesAreCheckedInTheFilesUnitsUnderTheirKeys) {
  testing::TempDir dir;
  // A valid file with `line` in place of the line of its key (or added).
  auto device_with = [&](const std::string& line) {
    const std::string path = dir.file("d.toml");
    std::ofstream file(path);
    for (const std::string base : {"memory_gib = 96", "peak_tflops_fp32 = 60", "peak_tflops_bf16 = 800",
                                   "memory_bandwidth_gb_s = 4000", "intra_node_gb_s = 400", "inter_node_gb_s = 50"}) {
      if (base.substr(0, base.find(' ')) != line.substr(0, line.find(' '))) file << base << "\n";
    }
    file << line << "\n";
    file.close();
    return resolve_device(path);
  };
  auto refused = [&](const std::string& line, const std::string& message) {
    testing::expect_error([&] { device_with(line); }, {"d.toml\": " + message});
  };
  refused("memory_gib = -80", "memory_gib = -80 must lie in (0, 1000000]");
  refused("peak_tflops_fp8 = 1e300", "peak_tflops_fp8 = 1e+300 must lie in [0, 1000000]");
  refused("gemm_efficiency = 0", "gemm_efficiency = 0 must lie in (0, 1]");
  refused("devices_per_node = 65537", "devices_per_node = 65537 must lie in [1, 65536]");
  refused("inter_node_latency_us = -1", "inter_node_latency_us = -1 must lie in [0, 1000000]");
  refused("devices_per_node = 2.5", "devices_per_node = 2.5 must be a whole number");
  refused("inter_node_links = -1", "inter_node_links = -1 must lie in [0, 65536]");
  refused("inter_node_links = 1.5", "inter_node_links = 1.5 must be a whole number");
  // The edges themselves are accepted.
  EXPECT_EQ(device_with("inter_node_links = 0").inter_node_links, 0);
  EXPECT_EQ(device_with("inter_node_links = 2").inter_node_links, 2);
  EXPECT_DOUBLE_EQ(device_with("gemm_efficiency = 1").gemm_efficiency, 1);
  EXPECT_EQ(device_with("devices_per_node = 65536").devices_per_node, 65536);
  EXPECT_DOUBLE_EQ(device_with("peak_tflops_fp8 = 0").peak_fp8, 0);
}

// Catches: a cluster size product wrapping in 32 bits (100000 x 100000 planned as
// 1410065408 devices), and the largest cluster refused or one past it accepted.
TEST(Planner, ClusterSizesAreMultipliedIn64BitsAndBounded) {
  const DeviceProfile h100 = builtin_device("h100-sxm");
  testing::expect_error([&] { make_cluster(h100, 100000, 100000, 0); },
                        {"--nodes 100000 x --devices-per-node 100000 = 10000000000 devices: more than the planner's "
                         "2097152"});
  testing::expect_error([&] { make_cluster(h100, 0, 0, 2000000000); }, {"= 2000000000 devices: more than"});
  EXPECT_EQ(make_cluster(h100, int{kMaxClusterDevices / 8}, 8, 0).devices(), kMaxClusterDevices);
  testing::expect_error([&] { make_cluster(h100, int{kMaxClusterDevices / 8} + 1, 8, 0); },
                        {"= 2097160 devices: more than the planner's 2097152"});
}

// Catches: bad input accepted, or refused without naming the setting and value.
TEST(Planner, BadInputIsRefusedByName) {
  testing::expect_error([&] { builtin_device("h100"); }, {"--device \"h100\" is not a device profile: the built-in ones are a100-80g, b200, "
                                       "h100-sxm, h200, cpu"});
  const DeviceProfile h100 = builtin_device("h100-sxm");
  testing::expect_error([&] { make_cluster(h100, 2, 8, 20); }, {"contradictory cluster sizes: --nodes 2 x --devices-per-node 8 = 16 devices, but --devices 20"});
  testing::expect_error([&] { make_cluster(h100, 0, 8, 20); }, {"--devices 20 is not a whole number of nodes of 8 devices"});
  testing::expect_error([&] { make_cluster(h100, 3, 0, 20); }, {"--devices 20 does not split over --nodes 3"});
  testing::expect_error([&] { make_cluster(h100, -1, 0, 0); }, {"cluster sizes must not be negative"});

  // A model no layout of 4 devices divides: 3 heads (no tp), one block (no pp 4), 3
  // tokens per sequence (no cp) and 3 sequences per step (no dp).
  RunConfig c;
  c.model = ModelConfig::preset("gpt2-tiny");
  c.model.n_head = 3, c.model.d_model = 96, c.model.d_ff = 384, c.model.n_layer = 1;
  c.seq_len = 3, c.batch_size = 3;
  testing::expect_error([&] { plan_layouts(c, make_cluster(h100, 1, 4, 0)); }, {"no layout of 4 devices can run this model and batch"});
}

}  // namespace
}  // namespace ndt
