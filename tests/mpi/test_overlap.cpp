// Overlap of communication with computation, which no loss or parameter can show: a
// layout that launches its gradient buckets late or prefetches the wrong unit computes
// the same numbers, only slower. GradientSync::overlap_stats() counts what must happen
// for speed and these tests hold the counts to their exact values, unit by unit:
//   - DDP and ZeRO-1 (BucketScheduler): every bucket launched in the after_backward of
//     the unit where it begins (so all during backward, none left for finish_backward)
//     on a sync micro-step; none at all on a no_sync one.
//   - FSDP stage 3: the all-gather a unit needs was already in flight (prefetched by the
//     unit before it), except the root group's (embedding + head) at the start of
//     forward; without prefetch every one starts on demand; without
//     reshard_after_forward the blocks stay gathered for backward (no gathers there).
// The model and the layout are built as the trainer builds them (parallelize()), and a
// recorder between the units and the layout reads the counters after every hook.
#include "mpi_env.h"
#include "parallel/data/buckets.h"
#include "parallel/parallelize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace ndt {
namespace {

constexpr int kLayers = 3, kB = 2, kT = 16;

ModelConfig tiny_model() {
  ModelConfig c = ModelConfig::preset("gpt2-tiny");
  c.n_layer = kLayers;
  c.d_model = 32;
  c.d_ff = 128;
  c.n_head = 4;
  c.max_seq_len = kT;
  return c;
}

// Forwards every hook to the layout and records its counters after each one, so a test
// can tell at which unit a bucket was launched or a gather was prefetched.
class Recorder : public ModelHooks {
 public:
  explicit Recorder(GradientSync& sync) : sync_(sync) {}

  void before_forward(int unit) override {
    const OverlapStats before = sync_.overlap_stats();
    sync_.before_forward(unit);
    forward_ += gather_kind(before, sync_.overlap_stats());
  }
  void after_forward(int unit) override { sync_.after_forward(unit); }
  void after_forward_only() override { sync_.after_forward_only(); }
  void before_backward(int unit) override {
    const OverlapStats before = sync_.overlap_stats();
    sync_.before_backward(unit);
    backward_ += gather_kind(before, sync_.overlap_stats());
  }
  void after_backward(int unit) override {
    sync_.after_backward(unit);
    launched_after_.push_back(sync_.overlap_stats().buckets_in_backward - at_start_.buckets_in_backward);
  }
  void poll() override { sync_.poll(); }

  // Starts recording a micro-step.
  void reset() {
    forward_.clear();
    backward_.clear();
    launched_after_.clear();
    at_start_ = sync_.overlap_stats();
  }
  // One character per unit, in the order the hooks ran: 'p' a prefetched gather, 'd' one
  // on demand, '.' none (the group was gathered already).
  const std::string& forward_gathers() const { return forward_; }
  const std::string& backward_gathers() const { return backward_; }
  // Buckets launched since reset(), after each unit's backward (backward order).
  const std::vector<int64_t>& launched_after() const { return launched_after_; }

 private:
  static char gather_kind(const OverlapStats& before, const OverlapStats& after) {
    const int64_t prefetched = after.gathers_prefetched - before.gathers_prefetched;
    const int64_t on_demand = after.gathers_on_demand - before.gathers_on_demand;
    if (prefetched + on_demand > 1) return '!';
    return prefetched ? 'p' : on_demand ? 'd' : '.';
  }

  GradientSync& sync_;
  OverlapStats at_start_;
  std::string forward_, backward_;
  std::vector<int64_t> launched_after_;
};

// A model, its layout and the recorder, built as the trainer builds them.
struct Harness {
  Harness(const MeshShape& shape, const ParallelOptions& options)
      : mesh(testing::world(), shape),
        model(tiny_model(), 1234, 256, /*materialize_parameters=*/false),
        sync(parallelize(model, mesh, options)),
        recorder(*sync) {
    model.set_hooks(&recorder);
    const int vocab = model.config().vocab_size;
    for (int i = 0; i < kB * kT; ++i) {  // different tokens on every rank, as data parallelism has
      inputs.push_back((7 * i + 31 * mesh.world().rank()) % vocab);
      targets.push_back((7 * i + 5 + 31 * mesh.world().rank()) % vocab);
    }
  }
  // One micro-step: forward and backward of this rank's micro-batch.
  void micro_step(bool sync_step) {
    recorder.reset();
    sync->begin_backward(sync_step);
    model.forward_backward(inputs.data(), targets.data(), kB, kT, 1.0f / (kB * kT));
    sync->finish_backward();
  }

  DeviceMesh mesh;
  Transformer model;
  std::unique_ptr<GradientSync> sync;
  Recorder recorder;
  std::vector<int32_t> inputs, targets;
};

MeshShape data_parallel(int n) {
  MeshShape s;
  s.dp_replicate = n;
  return s;
}
MeshShape sharded(int n) {
  MeshShape s;
  s.dp_shard = n;
  return s;
}

void expect_stats(const OverlapStats& s, int64_t in_backward, int64_t at_finish, int64_t prefetched,
                  int64_t on_demand, const std::string& what) {
  EXPECT_EQ(s.buckets_in_backward, in_backward) << what << ": buckets launched during backward";
  EXPECT_EQ(s.buckets_at_finish, at_finish) << what << ": buckets launched only in finish_backward";
  EXPECT_EQ(s.gathers_prefetched, prefetched) << what << ": all-gathers prefetched";
  EXPECT_EQ(s.gathers_on_demand, on_demand) << what << ": all-gathers on demand";
}

// DDP and ZeRO-1: buckets launch as soon as their gradients are final, during backward.
class BucketOverlap : public ::testing::TestWithParam<int> {};

TEST_P(BucketOverlap, EveryBucketLaunchesDuringBackwardAndNoneOnNoSync) {
  const int n = testing::world().size();
  const int stage = GetParam();
  ParallelOptions options;
  options.zero_stage = stage;
  options.bucket_bytes = 16 << 10;  // several buckets, some within a block, for the tiny model
  Harness s(stage == 0 ? data_parallel(n) : sharded(n), options);
  const std::string what = stage == 0 ? "DDP" : "ZeRO-1";
  const auto buckets = static_cast<int64_t>(s.sync->bucket_count());
  ASSERT_GE(buckets, kLayers + 2) << what << ": the test needs several buckets";

  // The buckets a unit's after_backward must have launched by then: those lying wholly
  // at or after the unit's first gradient (buckets run from the end of the arena).
  const ParameterStore& store = s.model.store();
  std::vector<GradientBucket> all = make_gradient_buckets(store, options.bucket_bytes);
  std::vector<int64_t> expected;  // backward order: units from the last
  for (int u = s.model.num_units(); u-- > 0;) {
    int64_t ready = 0;
    for (const GradientBucket& b : all) ready += b.begin >= store.unit_arena_begin(u) ? 1 : 0;
    expected.push_back(ready);
  }
  ASSERT_EQ(expected.back(), buckets);
  ASSERT_LT(expected.front(), buckets) << what << ": some bucket must wait for an earlier unit";

  s.sync->zero_grads();
  s.micro_step(/*sync=*/false);  // gradient accumulation: nothing communicates
  expect_stats(s.sync->overlap_stats(), 0, 0, 0, 0, what + ", no_sync micro-step");
  EXPECT_EQ(s.recorder.launched_after(), std::vector<int64_t>(expected.size(), 0)) << what << ", no_sync";
  s.micro_step(/*sync=*/true);
  expect_stats(s.sync->overlap_stats(), buckets, 0, 0, 0, what + ", sync micro-step");
  EXPECT_EQ(s.recorder.launched_after(), expected) << what << ": buckets launched by each unit's backward";
  s.sync->step(1e-3f, 1.0f);

  // Cumulative over the run; a sync step whose backward launched nothing (no backward
  // ran) leaves every bucket to finish_backward, and the counter says so.
  s.sync->zero_grads();
  s.micro_step(/*sync=*/true);
  expect_stats(s.sync->overlap_stats(), 2 * buckets, 0, 0, 0, what + ", second step");
  s.sync->begin_backward(true);
  s.sync->finish_backward();
  expect_stats(s.sync->overlap_stats(), 2 * buckets, buckets, 0, 0, what + ", no backward");
}

INSTANTIATE_TEST_SUITE_P(DdpAndZero1, BucketOverlap, ::testing::Values(0, 1));

// FSDP stage 3 with the trainer's groups: the root (embedding + head) and one per block.
struct FsdpCase {
  bool prefetch, reshard_after_forward;
  // Per micro-step (forward + backward of kLayers blocks), and per unit in hook order.
  int64_t prefetched, on_demand;
  const char* forward;   // units 0 .. kLayers + 1
  const char* backward;  // units kLayers + 1 .. 0
};

void PrintTo(const FsdpCase& c, std::ostream* os) {
  *os << "prefetch " << (c.prefetch ? "on" : "off") << ", reshard_after_forward "
      << (c.reshard_after_forward ? "on" : "off");
}

class GatherOverlap : public ::testing::TestWithParam<FsdpCase> {};

TEST_P(GatherOverlap, GathersArePrefetchedExactlyWhereTheyCan) {
  const FsdpCase& c = GetParam();
  ParallelOptions options;
  options.zero_stage = 3;
  options.prefetch = c.prefetch;
  options.reshard_after_forward = c.reshard_after_forward;
  Harness s(sharded(testing::world().size()), options);
  const std::string what = std::string("FSDP prefetch ") + (c.prefetch ? "on" : "off") + ", reshard_after_forward " +
                           (c.reshard_after_forward ? "on" : "off");

  s.sync->zero_grads();
  s.micro_step(/*sync=*/false);  // FSDP communicates on no_sync micro-steps too
  EXPECT_EQ(s.recorder.forward_gathers(), c.forward) << what << ": forward, units 0 ..";
  EXPECT_EQ(s.recorder.backward_gathers(), c.backward) << what << ": backward, units .. 0";
  expect_stats(s.sync->overlap_stats(), 0, 0, c.prefetched, c.on_demand, what + ", one micro-step");
  s.micro_step(/*sync=*/true);
  EXPECT_EQ(s.recorder.forward_gathers(), c.forward) << what << ": second micro-step";
  EXPECT_EQ(s.recorder.backward_gathers(), c.backward) << what << ": second micro-step";
  s.sync->step(1e-3f, 1.0f);
  s.sync->zero_grads();
  s.micro_step(/*sync=*/true);
  expect_stats(s.sync->overlap_stats(), 0, 0, 3 * c.prefetched, 3 * c.on_demand, what + ", three micro-steps");

  // A forward-only pass (evaluation): forward's gathers only, and nothing stays gathered.
  s.recorder.reset();
  s.model.evaluate(s.inputs.data(), s.targets.data(), kB, kT);
  const std::string forward_prefetched(c.forward);
  EXPECT_EQ(s.recorder.forward_gathers(), c.forward) << what << ": forward-only pass";
  const int64_t fwd_prefetched = std::count(forward_prefetched.begin(), forward_prefetched.end(), 'p');
  const int64_t fwd_on_demand = std::count(forward_prefetched.begin(), forward_prefetched.end(), 'd');
  expect_stats(s.sync->overlap_stats(), 0, 0, 3 * c.prefetched + fwd_prefetched, 3 * c.on_demand + fwd_on_demand,
               what + ", after a forward-only pass");
  s.recorder.reset();
  s.model.evaluate(s.inputs.data(), s.targets.data(), kB, kT);
  EXPECT_EQ(s.recorder.forward_gathers(), c.forward) << what << ": a second forward-only pass gathers again";
}

// kLayers = 3: units 0 (embedding), 1..3 (blocks), 4 (head); the root group is gathered
// once, at unit 0's forward, and stays until the end of backward.
INSTANTIATE_TEST_SUITE_P(
    Fsdp, GatherOverlap,
    ::testing::Values(FsdpCase{true, true, 2 * kLayers, 1, "dppp.", ".ppp."},
                      FsdpCase{false, true, 0, 1 + 2 * kLayers, "dddd.", ".ddd."},
                      FsdpCase{true, false, kLayers, 1, "dppp.", "....."},
                      FsdpCase{false, false, 0, 1 + kLayers, "dddd.", "....."}),
    [](const ::testing::TestParamInfo<FsdpCase>& info) {
      return std::string(info.param.prefetch ? "Prefetch" : "NoPrefetch") +
             (info.param.reshard_after_forward ? "Reshard" : "NoReshard");
    });

// ZeRO-2 keeps parameters whole: nothing to gather, no buckets.
TEST(GatherOverlapStage2, CountsNothing) {
  ParallelOptions options;
  options.zero_stage = 2;
  Harness s(sharded(testing::world().size()), options);
  s.sync->zero_grads();
  s.micro_step(true);
  expect_stats(s.sync->overlap_stats(), 0, 0, 0, 0, "ZeRO-2");
  EXPECT_EQ(s.recorder.forward_gathers(), ".....");
}

}  // namespace
}  // namespace ndt
