// The calibrated step-time model (plan/compute_time.h) and the device file that carries
// its constants: a GEMM's efficiency looked up by its size, the attention core and the
// kernels between the matmuls at their own rates, the per-call cost of a collective; a
// device without them priced as before; the file written by --calibrate read back
// exactly and its new keys checked by name.
#include "../common/errors.h"
#include "../common/temp_dir.h"
#include "model/transformer.h"
#include "plan/calibration.h"
#include "plan/compute_time.h"
#include "plan/planner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

namespace ndt {
namespace {

DeviceProfile tabled_device() {
  DeviceProfile d = builtin_device("h100-sxm");
  d.gemm_efficiency_by_size = {{64, 0.2}, {256, 0.6}, {1024, 0.9}};
  return d;
}

// Catches: a lookup that reads the wrong point, interpolates linearly in size instead of
// log size, or extrapolates past the table's ends.
TEST(ComputeTime, GemmEfficiencyIsLookedUpByTheCubeRootOfItsFlops) {
  const DeviceProfile d = tabled_device();
  EXPECT_DOUBLE_EQ(gemm_efficiency_at(d, 64, 64, 64), 0.2);
  EXPECT_DOUBLE_EQ(gemm_efficiency_at(d, 16, 16, 16), 0.2);        // held below the table
  EXPECT_DOUBLE_EQ(gemm_efficiency_at(d, 4096, 4096, 4096), 0.9);  // and above it
  EXPECT_NEAR(gemm_efficiency_at(d, 128, 128, 128), 0.4, 1e-12);   // halfway in log size
  EXPECT_NEAR(gemm_efficiency_at(d, 1024, 256, 64), 0.6, 1e-12);   // cbrt(1024 x 256 x 64) = 256
  DeviceProfile plain = builtin_device("h100-sxm");
  EXPECT_DOUBLE_EQ(gemm_efficiency_at(plain, 8, 8, 8), plain.gemm_efficiency);
}

// Catches: the attention table not read (the single figure used), read at the whole
// sequence under a ring (a rank's kernel call covers its block of seq_len / ring ranks),
// or interpolated linearly instead of in log length, or extrapolated past its ends.
TEST(ComputeTime, AttentionRateIsLookedUpAtTheKernelsSequenceLength) {
  DeviceProfile d = builtin_device("h100-sxm");
  EXPECT_DOUBLE_EQ(attention_flops_at(d, 64), d.attention_flops_per_s);  // no table: the single figure
  d.attention_by_length = {{32, 1e12}, {128, 3e12}, {512, 5e12}};
  EXPECT_DOUBLE_EQ(attention_flops_at(d, 32), 1e12);
  EXPECT_DOUBLE_EQ(attention_flops_at(d, 8), 1e12);      // held below the table
  EXPECT_DOUBLE_EQ(attention_flops_at(d, 4096), 5e12);   // and above it
  EXPECT_NEAR(attention_flops_at(d, 64), 2e12, 1e3);     // halfway in log length
  EXPECT_DOUBLE_EQ(attention_rate(d, 2.5e12, 512), 2.5e12);  // never above the run's GEMM rate

  RunConfig c;
  c.model = ModelConfig::preset("gpt2-tiny");
  c.seq_len = 128, c.batch_size = 8;
  c.mesh.cp = 2;
  // The same layout, priced on a table whose rate at one length is made 1000x slower:
  // only the length the ring's blocks have (64 of 128) may move the step.
  const auto compute_s = [&](double slow_length) {
    DeviceProfile t = d;
    t.attention_by_length = {{32, 3e12}, {64, 3e12}, {128, 3e12}};
    for (AttentionRatePoint& p : t.attention_by_length) {
      if (p.seq_len == slow_length) p.flops_per_s /= 1000;
    }
    return score_layout(c, make_cluster(t, 1, 2, 0)).time.compute_s;
  };
  const double flat = compute_s(0);
  EXPECT_GT(compute_s(64), 1.5 * flat);
  EXPECT_DOUBLE_EQ(compute_s(128), flat);
  c.cp_mode = CpMode::ulysses;  // Ulysses runs the whole sequence on each rank's heads
  EXPECT_GT(compute_s(128), 1.5 * compute_s(0));
  EXPECT_DOUBLE_EQ(compute_s(64), compute_s(0));
}

RunConfig tiny_run() {
  RunConfig c;
  c.model = ModelConfig::preset("gpt2-tiny");
  c.seq_len = 64, c.batch_size = 8;
  return c;
}

// Catches: the new figures changing the step of a device that does not give them, or
// a calibrated device's figures not reaching the step.
TEST(ComputeTime, StepUsesTheCalibratedFiguresAndOnlyThem) {
  const RunConfig c = tiny_run();
  DeviceProfile d = builtin_device("h100-sxm");
  const double before = score_layout(c, make_cluster(d, 1, 1, 0)).time.step_s;
  // A table flat at the device's own efficiency, and rates equal to the defaults: the same step.
  d.gemm_efficiency_by_size = {{10, d.gemm_efficiency}, {1000, d.gemm_efficiency}};
  d.attention_flops_per_s = d.peak_fp32 * d.gemm_efficiency;
  d.elementwise_bytes_per_s = d.memory_bytes_per_s;
  d.optimizer_bytes_per_s = d.memory_bytes_per_s;
  EXPECT_NEAR(score_layout(c, make_cluster(d, 1, 1, 0)).time.step_s, before, 1e-9 * before);
  // Each slower figure makes the step slower.
  DeviceProfile slow = d;
  slow.gemm_efficiency_by_size = {{10, 0.1}, {1000, 0.1}};
  EXPECT_GT(score_layout(c, make_cluster(slow, 1, 1, 0)).time.compute_s, 2 * before);
  slow = d, slow.attention_flops_per_s /= 100;
  EXPECT_GT(score_layout(c, make_cluster(slow, 1, 1, 0)).time.compute_s, 1.5 * before);
  slow = d, slow.elementwise_bytes_per_s /= 1000;
  EXPECT_GT(score_layout(c, make_cluster(slow, 1, 1, 0)).time.compute_s, 1.5 * before);
  // The optimizer at its own rate: a tenth of it, ten times the optimizer's time.
  const double optimizer_s = score_layout(c, make_cluster(d, 1, 1, 0)).time.optimizer_s;
  ASSERT_GT(optimizer_s, 0);
  slow = d, slow.optimizer_bytes_per_s /= 10;
  EXPECT_NEAR(score_layout(c, make_cluster(slow, 1, 1, 0)).time.optimizer_s, 10 * optimizer_s, 1e-9 * optimizer_s);
  // The profile's optimizer class: AdamW's 28 bytes a parameter and the gradient norm's 4.
  const double bytes = 32.0 * static_cast<double>(count_trainable_parameters(c.model));
  EXPECT_NEAR(optimizer_s, bytes / d.optimizer_bytes_per_s, 1e-9 * optimizer_s);
}

// Catches: the experts' load not reaching the step under ep, reaching it without ep (where
// every rank processes its own tokens' rows), or scaling more than the routed experts'
// matmuls (a device without an efficiency table: every matmul at one rate).
TEST(ComputeTime, ExpertsRunAtTheMostLoadedEpRanksPace) {
  RunConfig c;
  c.model = ModelConfig::preset("gpt2-moe-tiny");
  c.seq_len = 64, c.batch_size = 8;
  c.mesh.dp_shard = 2, c.mesh.ep = 2, c.zero_stage = 1;
  const DeviceProfile d = builtin_device("h100-sxm");
  Cluster balanced = make_cluster(d, 1, 2, 0), skewed = balanced;
  skewed.expert_load = 1.5;
  const double before = score_layout(c, balanced).time.compute_s;
  // The routed experts' matmuls of this rank's 4 x 64 tokens: 6 FLOPs per weight element
  // and token, k of E experts' weights each token.
  int64_t expert_params = 0;
  for (const ParameterSpec& spec : model_parameter_specs(c.model)) {
    if (spec.expert) expert_params += shape_numel(spec.logical_shape);
  }
  const double expert_flops = 6.0 * static_cast<double>(expert_params) * c.model.moe_top_k / c.model.n_experts * 4 * 64;
  // And the expert-side rows the dispatch copies and zeroes, in every MoE block.
  const double dispatch_bytes =
      c.model.n_layer / c.model.moe_every * (moe_dispatch_bytes(c.model, c.mesh, 4 * 64, 1.5) -
                                             moe_dispatch_bytes(c.model, c.mesh, 4 * 64, 1.0));
  const double expected =
      before + 0.5 * expert_flops / (d.peak_fp32 * d.gemm_efficiency) + dispatch_bytes / d.memory_bytes_per_s;
  EXPECT_NEAR(score_layout(c, skewed).time.compute_s, expected, 1e-9 * expected);
  c.mesh.ep = 1;
  EXPECT_DOUBLE_EQ(score_layout(c, skewed).time.compute_s, score_layout(c, balanced).time.compute_s);
}

// Catches: ranks that share cores (DeviceProfile::oversubscription) priced as if each
// idled its core through the pipeline's bubble, the bubble forgiven on ranks with cores of
// their own, across nodes (whose ranks sit in the same stages), or more than down to the
// stages' work or the path at a whole core.
TEST(ComputeTime, RanksSharingCoresLendThemThroughTheBubble) {
  RunConfig c = tiny_run();
  c.mesh.pp = 2, c.mesh.dp_replicate = 2, c.micro_batch_size = 1;
  DeviceProfile own = builtin_device("h100-sxm"), shared = own, crowded = own;
  shared.oversubscription = 2, crowded.oversubscription = 64;
  const TimeEstimate alone = score_layout(c, make_cluster(own, 1, 4, 0)).time;
  const TimeEstimate lent = score_layout(c, make_cluster(shared, 1, 4, 0)).time;
  const TimeEstimate busy = score_layout(c, make_cluster(crowded, 1, 4, 0)).time;
  ASSERT_GT(alone.bubble_s, 0.1 * alone.step_s);
  // At 64 ranks a core the step is the stages' work: less the bubble, and no less.
  EXPECT_LT(busy.step_s, alone.step_s - 0.5 * alone.bubble_s);
  EXPECT_GT(busy.step_s, alone.step_s - 1.5 * alone.bubble_s);
  // At 2 the larger of the work and the path at a whole core. The saving comes off the
  // bubble, down to none (a lighter stage idles longer than the bubble: that is lent too).
  EXPECT_DOUBLE_EQ(lent.step_s, std::max(busy.step_s, alone.step_s / 2));
  EXPECT_LT(lent.step_s, alone.step_s);
  EXPECT_NEAR(lent.bubble_s, std::max(0.0, alone.bubble_s - (alone.step_s - lent.step_s)), 1e-12 * alone.step_s);
  EXPECT_DOUBLE_EQ(lent.compute_s, alone.compute_s);
  // Across two nodes, and without a pipeline, nothing changes.
  EXPECT_DOUBLE_EQ(score_layout(c, make_cluster(shared, 2, 2, 0)).time.step_s,
                   score_layout(c, make_cluster(own, 2, 2, 0)).time.step_s);
  c.mesh.pp = 1, c.mesh.dp_replicate = 4;
  EXPECT_DOUBLE_EQ(score_layout(c, make_cluster(crowded, 1, 4, 0)).time.step_s,
                   score_layout(c, make_cluster(own, 1, 4, 0)).time.step_s);
}

// Catches: the MoE block's dispatch buffers left out of the traffic, counted without ep's
// regrouping copies or the experts' load, or with them where ep is 1.
TEST(ComputeTime, MoeDispatchBuffersAreTrafficOfTheirRows) {
  ModelConfig llama = ModelConfig::preset("llama-moe-tiny"), gpt2 = ModelConfig::preset("gpt2-moe-tiny");
  MeshShape ep1, ep2;
  ep2.ep = 2, ep2.dp_shard = 2;
  const double N = 256, S = N * llama.moe_top_k, C = llama.d_model, F = llama.expert_d_ff();
  // Balanced, one rank: the token side's passes and the zeroed gradients of its S rows.
  EXPECT_DOUBLE_EQ(moe_dispatch_bytes(llama, ep1, N, 1), 4 * (6 * S * C + 4 * N * C + S * C + 3 * S * F));
  // Under ep the regrouping copies, of R = 1.25 S rows, as are the zeroed ones.
  const double R = 1.25 * S;
  EXPECT_DOUBLE_EQ(moe_dispatch_bytes(llama, ep2, N, 1.25), 4 * (6 * S * C + 4 * N * C + 8 * R * C + R * C + 3 * R * F));
  // GELU experts have no up projection's gradient to zero.
  const double G = gpt2.expert_d_ff(), Cg = gpt2.d_model, Sg = N * gpt2.moe_top_k;
  EXPECT_DOUBLE_EQ(moe_dispatch_bytes(gpt2, ep1, N, 1), 4 * (6 * Sg * Cg + 4 * N * Cg + Sg * Cg + 2 * Sg * G));
  // A dense model's step is unchanged; an MoE model's other kernels carry the blocks' bytes.
  RunConfig c = tiny_run();
  const DeviceProfile d = builtin_device("h100-sxm");
  c.model = llama;
  const LayoutScore moe = score_layout(c, make_cluster(d, 1, 1, 0));
  const double blocks = llama.n_layer / llama.moe_every;
  const double expected = (3.0 * static_cast<double>(moe.memory.activations) +
                           blocks * moe_dispatch_bytes(llama, ep1, 8 * 64, 1)) / d.memory_bytes_per_s;
  EXPECT_NEAR(moe.time.memory_s, expected, 1e-12 * expected);
  c.model = ModelConfig::preset("llama-tiny");
  const LayoutScore dense = score_layout(c, make_cluster(d, 1, 1, 0));
  EXPECT_NEAR(dense.time.memory_s, 3.0 * static_cast<double>(dense.memory.activations) / d.memory_bytes_per_s,
              1e-12 * dense.time.memory_s);
}

// Catches: a per-call cost not charged per call (FSDP's many small collectives priced
// like DDP's few).
TEST(ComputeTime, PerCallCostIsChargedForEveryCall) {
  RunConfig c = tiny_run();
  c.mesh.dp_shard = 2, c.zero_stage = 3;
  DeviceProfile d = builtin_device("h100-sxm");
  d.overlaps_communication = false;
  const LayoutScore before = score_layout(c, make_cluster(d, 1, 2, 0));
  d.intra_node.call_s = 1e-3;
  const LayoutScore after = score_layout(c, make_cluster(d, 1, 2, 0));
  int64_t calls = 0;
  for (size_t a = 0; a < kNumAxes; ++a) {
    if (!is_alias_axis(static_cast<Axis>(a), after.layout.mesh)) calls += after.comm[a].calls;
  }
  ASSERT_GT(calls, 10);
  // The world's small collectives go over the same link: at least the axes' calls.
  EXPECT_GE(after.time.step_s - before.time.step_s, 1e-3 * static_cast<double>(calls) - 1e-9);
}

// Catches: ZeRO's and FSDP's copies around their collectives (unpacking gathered
// parameters, zeroing and packing gradients) left out of the step, or charged per step
// where they are per micro-batch or the reverse: FSDP adds 3.5 copies of the rank's
// parameters per micro-batch to compute, ZeRO-2 1.5 and one per step, ZeRO-1 two per
// step, each at the memory bandwidth.
TEST(ComputeTime, ShardingCopiesArePricedAtTheMemoryBandwidth) {
  RunConfig c = tiny_run();
  c.mesh.dp_shard = 2, c.micro_batch_size = 2;  // 8 sequences over 2 ranks: 2 micro-batches
  const DeviceProfile d = builtin_device("h100-sxm");
  const double copy_s = 4.0 * static_cast<double>(count_trainable_parameters(c.model)) / d.memory_bytes_per_s;
  auto time = [&](int zero_stage) {
    c.zero_stage = zero_stage;
    return score_layout(c, make_cluster(d, 1, 2, 0)).time;
  };
  const double zero1 = time(1).compute_s;  // ZeRO-1 copies nothing per micro-batch
  EXPECT_NEAR(time(2).compute_s - zero1, 2 * 1.5 * copy_s, 1e-9 * zero1);
  EXPECT_NEAR(time(3).compute_s - zero1, 2 * 3.5 * copy_s, 1e-9 * zero1);
  // Once a step, with the update (stages 1-3 shard the optimizer alike): ZeRO-1 packs the
  // gradients and unpacks the updated rows, ZeRO-2 unpacks the updated parameters.
  const double fsdp = time(3).optimizer_s;
  EXPECT_NEAR(time(1).optimizer_s - fsdp, 2 * copy_s, 1e-9 * fsdp);
  EXPECT_NEAR(time(2).optimizer_s - fsdp, 1 * copy_s, 1e-9 * fsdp);
  // The once-a-step copies are named apart (the validation sets them with the elementwise kernels).
  EXPECT_NEAR(time(1).step_copies_s, 2 * copy_s, 1e-12 * copy_s);
  EXPECT_NEAR(time(2).step_copies_s, 1 * copy_s, 1e-12 * copy_s);
  EXPECT_EQ(time(3).step_copies_s, 0.0);
}

// Catches: a class of the compute (what `plan --validate` sets against the run's profile)
// that is not the compute's: a term left out of the split, counted twice, or the per-
// micro-batch figures not multiplied by the micro-batches.
TEST(ComputeTime, ComputeIsItsMatmulsAttentionAndMemoryTraffic) {
  RunConfig c = tiny_run();
  DeviceProfile d = tabled_device();
  d.attention_flops_per_s = 0.3 * d.peak_flops(DType::f32, false);
  d.elementwise_bytes_per_s = 0.5 * d.memory_bytes_per_s;
  c.mesh.dp_shard = 2, c.micro_batch_size = 2, c.zero_stage = 3;
  c.activation_checkpointing.mode = CheckpointMode::full;
  const TimeEstimate t = score_layout(c, make_cluster(d, 1, 2, 0)).time;
  EXPECT_GT(t.matmul_s, 0.0);
  EXPECT_GT(t.attention_s, 0.0);
  EXPECT_GT(t.memory_s, 0.0);
  EXPECT_NEAR(t.matmul_s + t.attention_s + t.memory_s, t.compute_s, 1e-12 * t.compute_s);
  // Two micro-batches of two sequences attend as much as one of four.
  c.micro_batch_size = 4;
  const TimeEstimate one = score_layout(c, make_cluster(d, 1, 2, 0)).time;
  EXPECT_NEAR(t.attention_s, one.attention_s, 1e-12 * one.attention_s);
}

// Catches: a calibrated device file that does not read back as written.
TEST(ComputeTime, DeviceFileTextReadsBackAsWritten) {
  DeviceProfile d = tabled_device();
  d.name = "calibrated";
  d.attention_flops_per_s = 12.5e9, d.elementwise_bytes_per_s = 3.25e9, d.fma_flops_per_s = 40e9;
  d.optimizer_bytes_per_s = 6.75e9;
  d.attention_by_length = {{32, 4.25e9}, {128, 12.5e9}};
  d.intra_node = {2.5e9, 1e-6, 7e-6}, d.inter_node = {1.25e9, 2e-6, 9e-6};
  d.inter_node_links = 1, d.overlaps_communication = false, d.disk_bytes_per_s = 1.5e9;
  d.oversubscription = 2.5;
  const auto reduce_scatter = static_cast<size_t>(TimedCollective::reduce_scatter);
  const auto all_to_all = static_cast<size_t>(TimedCollective::all_to_all);
  d.collective_calls[reduce_scatter] = {{4096, 20e-6}, {65536, 125.5e-6}};
  d.collective_calls[all_to_all] = {{2048, 10e-6}, {65536, 40.25e-6}, {1 << 20, 400e-6}};
  testing::TempDir dir;
  std::ofstream(dir.file("d.toml")) << device_file_text(d, "two lines\nof comment");
  const DeviceProfile r = load_device_profile(dir.file("d.toml"));
  EXPECT_EQ(r.name, "calibrated");
  ASSERT_EQ(r.gemm_efficiency_by_size.size(), 3u);
  EXPECT_DOUBLE_EQ(r.gemm_efficiency_by_size[1].size, 256);
  EXPECT_DOUBLE_EQ(r.gemm_efficiency_by_size[1].efficiency, 0.6);
  EXPECT_DOUBLE_EQ(r.attention_flops_per_s, 12.5e9);
  ASSERT_EQ(r.attention_by_length.size(), 2u);
  EXPECT_DOUBLE_EQ(r.attention_by_length[0].seq_len, 32);
  EXPECT_DOUBLE_EQ(r.attention_by_length[0].flops_per_s, 4.25e9);
  EXPECT_DOUBLE_EQ(r.attention_by_length[1].seq_len, 128);
  EXPECT_DOUBLE_EQ(r.attention_by_length[1].flops_per_s, 12.5e9);
  EXPECT_DOUBLE_EQ(r.elementwise_bytes_per_s, 3.25e9);
  EXPECT_DOUBLE_EQ(r.optimizer_bytes_per_s, 6.75e9);
  EXPECT_DOUBLE_EQ(r.fma_flops_per_s, 40e9);
  EXPECT_DOUBLE_EQ(r.intra_node.call_s, 7e-6);
  EXPECT_DOUBLE_EQ(r.inter_node.call_s, 9e-6);
  EXPECT_DOUBLE_EQ(r.peak_bf16, d.peak_bf16);
  EXPECT_DOUBLE_EQ(r.memory_bytes_per_s, d.memory_bytes_per_s);
  EXPECT_FALSE(r.overlaps_communication);
  EXPECT_DOUBLE_EQ(r.disk_bytes_per_s, 1.5e9);
  EXPECT_DOUBLE_EQ(r.oversubscription, 2.5);
  EXPECT_TRUE(r.collective_calls[static_cast<size_t>(TimedCollective::all_reduce)].empty());
  ASSERT_EQ(r.collective_calls[reduce_scatter].size(), 2u);
  EXPECT_DOUBLE_EQ(r.collective_calls[reduce_scatter][1].wire_bytes, 65536);
  EXPECT_NEAR(r.collective_calls[reduce_scatter][1].seconds, 125.5e-6, 1e-18);
  ASSERT_EQ(r.collective_calls[all_to_all].size(), 3u);
  EXPECT_DOUBLE_EQ(r.collective_calls[all_to_all][0].wire_bytes, 2048);
  EXPECT_NEAR(r.collective_calls[all_to_all][2].seconds, 400e-6, 1e-18);
}

// Catches: a calibrated key accepted out of its range, or refused without its name.
TEST(ComputeTime, CalibratedKeysAreCheckedByName) {
  testing::TempDir dir;
  const std::string required = "memory_gib = 96\npeak_tflops_fp32 = 60\npeak_tflops_bf16 = 800\n"
                               "memory_bandwidth_gb_s = 4000\nintra_node_gb_s = 400\ninter_node_gb_s = 50\n";
  auto refused = [&](const std::string& lines, const std::string& message) {
    std::ofstream(dir.file("d.toml")) << required << lines;
    testing::expect_error([&] { load_device_profile(dir.file("d.toml")); }, {"d.toml\": " + message});
  };
  refused("gemm_sizes = [64, 128]\ngemm_efficiencies = [0.5]\n",
          "gemm_sizes has 2 values and gemm_efficiencies 1: they pair up");
  refused("gemm_sizes = [128, 64]\ngemm_efficiencies = [0.5, 0.6]\n",
          "gemm_sizes[1] = 64 must lie in (0, 1000000] and exceed the size before it");
  refused("gemm_sizes = [64]\ngemm_efficiencies = [1.5]\n", "gemm_efficiencies[0] = 1.5 must lie in (0, 1]");
  refused("gemm_sizes = 64\n", "gemm_sizes must be a list of numbers");
  refused("attention_seq_lens = [64, 128]\nattention_gflops_by_seq = [50]\n",
          "attention_seq_lens has 2 values and attention_gflops_by_seq 1: they pair up");
  refused("attention_seq_lens = [128, 64]\nattention_gflops_by_seq = [50, 60]\n",
          "attention_seq_lens[1] = 64 must lie in [1, 1e9] and exceed the length before it");
  refused("attention_seq_lens = [64]\nattention_gflops_by_seq = [0]\n",
          "attention_gflops_by_seq[0] = 0 must lie in (0, 1e9]");
  refused("attention_gflops = -1\n", "attention_gflops = -1 must lie in [0, 1000000000]");
  refused("elementwise_gb_s = 2e6\n", "elementwise_gb_s = 2000000 must lie in [0, 1000000]");
  refused("optimizer_gb_s = -2\n", "optimizer_gb_s = -2 must lie in [0, 1000000]");
  refused("oversubscription = 0.5\n", "oversubscription = 0.5 must lie in [1, 65536]");
  refused("intra_node_call_us = -3\n", "intra_node_call_us = -3 must lie in [0, 1000000]");
  refused("all_gather_wire_bytes = [4096, 65536]\nall_gather_call_us = [12]\n",
          "all_gather_wire_bytes has 2 values and all_gather_call_us 1: they pair up");
  refused("all_gather_wire_bytes = [65536, 4096]\nall_gather_call_us = [12, 30]\n",
          "all_gather_wire_bytes[1] = 4096 must lie in [1, 1e12] and exceed the size before it");
  refused("all_reduce_wire_bytes = [4096]\nall_reduce_call_us = [0]\n", "all_reduce_call_us[0] = 0 must lie in (0, 1e9]");
  refused("reduce_scatter_call_us = [12]\n",
          "reduce_scatter_wire_bytes has 0 values and reduce_scatter_call_us 1: they pair up");
}

// Catches: calibration GEMMs timed on operands that drift out of the normal floats from
// call to call (decaying into denormals, which ran 10-100x slower, or growing into
// infinities), so that a width's efficiency measures the data, not the GEMM.
TEST(Calibration, TheGemmOperandsKeepTheirMagnitudeFromCallToCall) {
  // With 0.02 for W, X left the normal floats within 110 calls at width 32 (0.41x a
  // call), 190 at 64 (1.64x) and 30 at 256 (26x).
  for (int s : {32, 64, 128, 256}) {
    CalibrationLayer layer(s);
    const float start = layer.x[0];
    for (int call = 0; call < (s <= 128 ? 200 : 40); ++call) layer.forward_and_backward();
    for (const std::vector<float>* v : {&layer.x, &layer.y, &layer.dw}) {
      for (float f : *v) ASSERT_TRUE(std::isnormal(f)) << "width " << s << ": " << f;
    }
    EXPECT_NEAR(layer.x[0] / start, 1.0, 0.01) << "width " << s;
    EXPECT_NEAR(layer.x.back() / start, 1.0, 0.01) << "width " << s;
  }
}

}  // namespace
}  // namespace ndt
