// Expert parallelism (parallel/expert/expert_parallel.h): the ep and edp groups the mesh
// builds from the data-parallel ranks and the errors for a bad ep; the all-to-all
// dispatch and combine against rows computed independently from every rank's routing,
// and their counters; gather_expert_parallel composed with gather_tensor_parallel
// against one rank's values; DDP over an expert-parallel store (buckets per group,
// gradients reduced over edp, the norm, each expert block saved once, the memory
// model); parallelize's refusals. ZeRO stages 1 to 3 and HSDP with ep: training
// against one rank for both families, the memory model against the ledger, the
// experts' reduce-scatter bytes over edp_shard, and a checkpoint saved under FSDP x ep
// resumed on one rank and under DDP x ep = world. Training with DDP x ep against one
// rank and checkpoints across ep sizes: tests/mpi/test_moe.cpp. Runs under mpirun with
// 2 and 4 ranks.
#include <algorithm>

#include "../common/one_rank_mesh.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "checkpoint/directory.h"
#include "comm/device_mesh.h"
#include "core/error.h"
#include "mpi_env.h"
#include "parallel/data/data_parallel.h"
#include "parallel/expert/expert_parallel.h"
#include "parallel/memory_model.h"
#include "parallel/parallelize.h"
#include "parallel/tensor/tensor_parallel.h"
#include "parity.h"
#include "shared_dir.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace ndt {
namespace {

// World ranks of the members of `axis`, in the communicator's rank order.
std::vector<int> members(DeviceMesh& mesh, Axis axis) {
  Communicator& comm = mesh.axis(axis);
  int32_t me = mesh.world().rank();
  std::vector<int32_t> all(static_cast<size_t>(comm.size()));
  comm.all_gather(&me, all.data(), 1, DType::i32);
  return {all.begin(), all.end()};
}

MeshShape shape(int pp, int dp_replicate, int dp_shard, int cp, int tp, int ep) {
  MeshShape s{pp, dp_replicate, dp_shard, cp, tp};
  s.ep = ep;
  return s;
}

// The message of the Error that f throws ("" if none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// The mesh

// Catches: ep or edp built over the wrong ranks (not within dp_shard x cp, not c % ep / c / ep), or wrong coordinates.
TEST(ExpertParallelMesh, GroupsBorrowTheDataParallelRanks) {
  Communicator& world = testing::world();
  const int n = world.size(), r = world.rank();
  {
    DeviceMesh mesh(world, shape(1, 1, n, 1, 1, n));  // every rank one expert group, edp each rank alone
    std::vector<int> everyone;
    for (int i = 0; i < n; ++i) everyone.push_back(i);
    EXPECT_EQ(members(mesh, Axis::ep), everyone);
    EXPECT_EQ(members(mesh, Axis::edp), std::vector<int>{r});
    EXPECT_EQ(members(mesh, Axis::edp_shard), std::vector<int>{r});
    EXPECT_EQ(mesh.axis(Axis::edp_shard).axis(), "edp_shard");
    EXPECT_EQ(mesh.coord(Axis::ep), r);
    EXPECT_EQ(mesh.coord(Axis::edp), 0);
    EXPECT_EQ(mesh.size(Axis::edp), 1);
    EXPECT_EQ(mesh.axis(Axis::ep).axis(), "ep");
    EXPECT_EQ(mesh.axis(Axis::edp).axis(), "edp");
    EXPECT_EQ(mesh.shape().str(), "pp=1 x dp_replicate=1 x dp_shard=" + std::to_string(n) + " x cp=1 x tp=1 (ep=" +
                                      std::to_string(n) + ")");
  }
  {
    // ep = 1: ep is each rank alone, edp is dp_cp itself (the same counters), str() unchanged.
    DeviceMesh mesh(world, shape(1, 1, n, 1, 1, 1));
    EXPECT_EQ(members(mesh, Axis::ep), std::vector<int>{r});
    EXPECT_EQ(&mesh.axis(Axis::edp), &mesh.axis(Axis::dp_cp));
    EXPECT_EQ(&mesh.axis(Axis::edp_shard), &mesh.axis(Axis::dp_shard_cp));
    EXPECT_EQ(mesh.coord(Axis::edp_shard), mesh.coord(Axis::dp_shard_cp));
    EXPECT_EQ(mesh.coord(Axis::edp), mesh.coord(Axis::dp_cp));
    EXPECT_EQ(mesh.shape().str(), "pp=1 x dp_replicate=1 x dp_shard=" + std::to_string(n) + " x cp=1 x tp=1");
  }
  if (n != 4) return;
  const int pair = r / 2 * 2;
  {
    DeviceMesh mesh(world, shape(1, 1, 4, 1, 1, 2));  // c = r: ep pairs {0,1} {2,3}, edp {0,2} {1,3}
    EXPECT_EQ(members(mesh, Axis::ep), (std::vector<int>{pair, pair + 1}));
    EXPECT_EQ(members(mesh, Axis::edp), (std::vector<int>{r % 2, r % 2 + 2}));
    EXPECT_EQ(mesh.coord(Axis::ep), r % 2);
    EXPECT_EQ(mesh.coord(Axis::edp), r / 2);
    EXPECT_EQ(mesh.size(Axis::edp), 2);
    EXPECT_EQ(members(mesh, Axis::edp_shard), (std::vector<int>{r % 2, r % 2 + 2}));  // one replica: edp itself
    EXPECT_EQ(mesh.coord(Axis::edp_shard), r / 2);
    EXPECT_EQ(mesh.size(Axis::edp_shard), 2);
  }
  {
    DeviceMesh mesh(world, shape(1, 1, 2, 2, 1, 2));  // dp_shard x cp = 2 x 2: c = r, ep takes cp's ranks
    EXPECT_EQ(members(mesh, Axis::ep), (std::vector<int>{pair, pair + 1}));
    EXPECT_EQ(members(mesh, Axis::edp), (std::vector<int>{r % 2, r % 2 + 2}));
  }
  {
    DeviceMesh mesh(world, shape(1, 1, 2, 2, 1, 4));  // ep = dp_shard x cp: everyone
    EXPECT_EQ(members(mesh, Axis::ep), (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(mesh.coord(Axis::ep), r);
  }
  {
    DeviceMesh mesh(world, shape(1, 2, 2, 1, 1, 2));  // HSDP shape: ep within dp_shard, edp over dp_replicate
    EXPECT_EQ(members(mesh, Axis::ep), (std::vector<int>{pair, pair + 1}));
    EXPECT_EQ(members(mesh, Axis::edp), (std::vector<int>{r % 2, r % 2 + 2}));
    EXPECT_EQ(mesh.coord(Axis::edp), r / 2);
    EXPECT_EQ(members(mesh, Axis::edp_shard), std::vector<int>{r});  // within a replica, alone
    EXPECT_EQ(mesh.size(Axis::edp_shard), 1);
  }
  {
    DeviceMesh mesh(world, shape(1, 1, 2, 1, 2, 2));  // tp innermost: ep over dp_shard, same tp rank
    EXPECT_EQ(members(mesh, Axis::ep), (std::vector<int>{r % 2, r % 2 + 2}));
    EXPECT_EQ(members(mesh, Axis::edp), std::vector<int>{r});
  }
  {
    DeviceMesh mesh(world, shape(2, 1, 2, 1, 1, 2));  // pp outermost: ep within a stage
    EXPECT_EQ(members(mesh, Axis::ep), (std::vector<int>{pair, pair + 1}));
    EXPECT_EQ(members(mesh, Axis::edp), std::vector<int>{r});
  }
}

// Catches: an ep that does not divide the ranks it borrows (or is 0) accepted, or refused without the sizes.
TEST(ExpertParallelMesh, RefusesAnEpThatDoesNotDivideDpShardTimesCp) {
  Communicator& world = testing::world();
  const int n = world.size();
  EXPECT_EQ(error_of([&] { shape(1, n, 1, 1, 1, 2).validate(n); }),
            "parallel.ep = 2 must divide the data-parallel ranks it borrows, parallel.dp_shard x cp = 1 x 1 = 1");
  EXPECT_EQ(error_of([&] { shape(1, 1, n, 1, 1, 2 * n).validate(n); }),
            "parallel.ep = " + std::to_string(2 * n) + " must divide the data-parallel ranks it borrows, "
            "parallel.dp_shard x cp = " + std::to_string(n) + " x 1 = " + std::to_string(n));
  EXPECT_EQ(error_of([&] { shape(1, 1, n, 1, 1, 0).validate(n); }), "parallel.ep = 0 must be at least 1");
  // ep is not a factor of the world size.
  EXPECT_EQ(error_of([&] { shape(1, 1, n, 1, 1, n).validate(n); }), "");
  EXPECT_EQ(error_of([&] { DeviceMesh mesh(world, shape(1, n, 1, 1, 1, n)); }).find("parallel.ep = "), 0u);
}

// ---------------------------------------------------------------------------------------------
// Dispatch and combine

constexpr int kLocalExperts = 3;
constexpr int64_t kWidth = 3;

// Rows rank `src` of ep group `group` routes to global expert e: 0 to 3, none ever to
// expert 1 (an expert receiving nothing), and none from rank 1 to rank 0's experts.
int64_t routed(int group, int src, int e) {
  if (e == 1 || (src == 1 && e < kLocalExperts)) return 0;
  return (group * 7 + src * 5 + e * 3) % 4;
}

// The value of column col of row i routed by (group, src) to expert e: unique, exact in fp32.
float row_value(int group, int src, int e, int64_t i, int64_t col) {
  return static_cast<float>(group * 1000000 + src * 100000 + e * 1000 + i * 10 + col);
}

void expect_dispatch_round_trip(DeviceMesh& mesh, const char* what) {
  Communicator& ep = mesh.axis(Axis::ep);
  const int n = ep.size(), me = ep.rank(), E = kLocalExperts * n;
  const int group = mesh.coord(Axis::edp);  // tells the ep groups apart
  const ExpertParallel dispatch(ep);
  ExpertRoute route;
  std::vector<float> tokens;
  for (int e = 0; e < E; ++e) {
    route.send_counts.push_back(routed(group, me, e));
    for (int64_t i = 0; i < route.send_counts.back(); ++i) {
      for (int64_t col = 0; col < kWidth; ++col) tokens.push_back(row_value(group, me, e, i, col));
    }
  }
  ep.stats() = {};
  dispatch.plan(route);
  EXPECT_EQ(route.ep, n) << what;
  ASSERT_EQ(route.local_experts, kLocalExperts) << what;
  EXPECT_EQ(ep.stats()[CommOp::all_gather].payload_bytes, 4 * E * n) << what;
  // The most loaded rank's expert-side rows, the same on every rank of the group.
  int64_t most_loaded = 0;
  for (int holder = 0; holder < n; ++holder) {
    int64_t rows = 0;
    for (int src = 0; src < n; ++src) {
      for (int le = 0; le < kLocalExperts; ++le) rows += routed(group, src, holder * kLocalExperts + le);
    }
    most_loaded = std::max(most_loaded, rows);
  }
  EXPECT_EQ(route.most_loaded_rows, most_loaded) << what;
  // Expert side: each local expert's rows, from every source in rank order.
  std::vector<float> expected;
  int64_t from_self = 0;
  for (int le = 0; le < kLocalExperts; ++le) {
    const int e = me * kLocalExperts + le;
    for (int src = 0; src < n; ++src) {
      EXPECT_EQ(route.recv_counts[static_cast<size_t>(src * kLocalExperts + le)], routed(group, src, e)) << what;
      for (int64_t i = 0; i < routed(group, src, e); ++i) {
        for (int64_t col = 0; col < kWidth; ++col) expected.push_back(row_value(group, src, e, i, col));
      }
      if (src == me) from_self += routed(group, src, e);
    }
  }
  ASSERT_EQ(route.expert_rows() * kWidth, static_cast<int64_t>(expected.size())) << what;

  std::vector<float> experts(expected.size(), -1.0f);
  dispatch.to_experts(route, tokens.data(), experts.data(), kWidth);
  EXPECT_EQ(experts, expected) << what << ": the expert side";
  const CommCounter sent = ep.stats()[CommOp::all_to_all_v];
  EXPECT_EQ(sent.payload_bytes, route.token_rows() * kWidth * 4) << what;
  int64_t to_self = 0;
  for (int le = 0; le < kLocalExperts; ++le) to_self += route.send_counts[static_cast<size_t>(me * kLocalExperts + le)];
  EXPECT_EQ(sent.wire_bytes, (route.token_rows() - to_self) * kWidth * 4) << what;

  std::vector<float> back(tokens.size(), -1.0f);
  dispatch.from_experts(route, experts.data(), back.data(), kWidth);
  EXPECT_EQ(std::memcmp(back.data(), tokens.data(), tokens.size() * sizeof(float)), 0) << what << ": round trip";
  const CommCounter combined = ep.stats()[CommOp::all_to_all_v];
  EXPECT_EQ(combined.calls, 2) << what;
  EXPECT_EQ(combined.payload_bytes - sent.payload_bytes, route.expert_rows() * kWidth * 4) << what;
  EXPECT_EQ(combined.wire_bytes - sent.wire_bytes, (route.expert_rows() - from_self) * kWidth * 4) << what;
}

// Catches: rows sent to the wrong rank, left in [src][le] order, an expert receiving nothing mishandled, a combine
// that is not the exact inverse, counters that count rows kept on the rank as sent, or a most loaded rank
// taken from this rank's rows alone.
TEST(ExpertParallelDispatch, EveryExpertGetsItsRowsAndCombineRestoresThem) {
  Communicator& world = testing::world();
  const int n = world.size();
  {
    DeviceMesh mesh(world, shape(1, 1, n, 1, 1, n));
    expect_dispatch_round_trip(mesh, "ep = world");
  }
  if (n == 4) {
    DeviceMesh mesh(world, shape(1, 1, 4, 1, 1, 2));
    expect_dispatch_round_trip(mesh, "ep = 2 of 4");
  }
  {
    DeviceMesh mesh(world, shape(1, 1, n, 1, 1, 1));  // a group of one: the rows stay, as the base class
    expect_dispatch_round_trip(mesh, "ep = 1");
  }
}

// ---------------------------------------------------------------------------------------------
// A hand-made store: two routed expert weights (tp on dims 1 and 2, as column- and
// row-parallel experts), a tp-sharded and two replicated parameters.

std::vector<ParameterSpec> expert_specs() {
  auto spec = [](const char* name, Shape shape, int tp_dim, bool expert, int unit) {
    ParameterSpec s{name, std::move(shape), InitKind::normal, 0.02f, true, tp_dim};
    s.expert = expert;
    s.unit = unit;
    return s;
  };
  return {spec("embed", {8, 6}, 0, false, 0), spec("experts.fc", {4, 12, 6}, 1, true, 1),
          spec("norm", {6}, -1, false, 1), spec("experts.proj", {4, 6, 12}, 2, true, 1),
          spec("head", {5, 6}, -1, false, 2)};
}

// A store placed as parallelize() places a DDP layout's parameters, split (keeping
// only the parameters `held` says, as a pipeline stage does) and materialised.
ParameterStore placed_store(DeviceMesh& mesh, bool (*held)(const Parameter&) = nullptr) {
  ParameterStore store(expert_specs(), 7, /*materialize=*/false);
  const MeshShape& s = mesh.shape();
  for (Parameter& p : store.params()) {
    if (const auto tp = tensor_parallel_placement(p.spec, s.tp)) p.placements.push_back(*tp);
    if (p.spec.expert && s.ep > 1) {
      p.placements.push_back(Placement{Axis::ep, Placement::Kind::shard, 0});
      if (s.size(Axis::edp) > 1) p.grad_partial.push_back(Axis::edp);
    } else {
      if (s.dp_replicate > 1) p.grad_partial.push_back(Axis::dp_replicate);
      if (s.dp_shard > 1) p.grad_partial.push_back(Axis::dp_shard);
      if (s.cp > 1) p.grad_partial.push_back(Axis::cp);
    }
  }
  store.split_blocks(Axis::tp, mesh.coord(Axis::tp), s.tp);
  store.split_blocks(Axis::ep, mesh.coord(Axis::ep), s.ep);
  if (held) store.keep_only(held);
  store.materialize();
  return store;
}

// The logical indices of the elements of the box (offset, box) of a tensor of shape
// `logical`, in the box's row-major order.
std::vector<int64_t> logical_indices(const Shape& logical, const Shape& offset, const Shape& box) {
  std::vector<int64_t> out;
  const int64_t n = shape_numel(box);
  for (int64_t k = 0; k < n; ++k) {
    int64_t rem = k, index = 0, stride = 1;
    for (size_t d = box.size(); d-- > 0;) {
      index += (rem % box[d] + offset[d]) * stride;
      rem /= box[d];
      stride *= logical[d];
    }
    out.push_back(index);
  }
  return out;
}

// Catches: ep blocks joined in the wrong order or onto the wrong dim, gather_tensor_parallel reading an ep-joined
// input at the store's arena offsets, or an ep split that does not initialise its block from its logical position.
TEST(ExpertParallelGather, JoinsBlocksIntoOneRanksValues) {
  Communicator& world = testing::world();
  const int n = world.size();
  const ParameterStore whole(expert_specs(), 7);
  const std::vector<float> expected(whole.values().data<float>(), whole.values().data<float>() + whole.numel());
  std::vector<MeshShape> shapes = {shape(1, 1, n, 1, 1, n), shape(1, 1, 1, 1, n, 1)};
  if (n == 4) shapes.push_back(shape(1, 1, 2, 1, 2, 2)), shapes.push_back(shape(1, 1, 4, 1, 1, 2));
  for (const MeshShape& s : shapes) {
    DeviceMesh mesh(world, s);
    const ParameterStore store = placed_store(mesh);
    const int e = mesh.coord(Axis::ep), t = mesh.coord(Axis::tp);
    EXPECT_EQ(store.get("experts.fc").local_shape, (Shape{4 / s.ep, 12 / s.tp, 6}));
    EXPECT_EQ(store.get("experts.fc").local_offset, (Shape{4 / s.ep * e, 12 / s.tp * t, 0}));
    EXPECT_EQ(store.get("experts.proj").local_offset, (Shape{4 / s.ep * e, 0, 12 / s.tp * t}));
    const std::vector<float> blocks = gather_expert_parallel(store, store.values().data<float>(), &mesh.axis(Axis::ep));
    const std::vector<float> full = gather_tensor_parallel(store, blocks.data(), TensorParallel{&mesh.axis(Axis::tp)});
    EXPECT_EQ(full, expected) << s.str();
  }
  // A parameter not on this (pipeline) stage comes out as zeros, the others in place.
  DeviceMesh mesh(world, shape(1, 1, n, 1, 1, n));
  const ParameterStore store = placed_store(mesh, [](const Parameter& p) { return p.name() != "experts.fc"; });
  const std::vector<float> full = gather_tensor_parallel(
      store, gather_expert_parallel(store, store.values().data<float>(), &mesh.axis(Axis::ep)).data(), TensorParallel{});
  std::vector<float> without = expected;
  const int64_t fc = 8 * 6;  // after the embedding
  std::fill(without.begin() + fc, without.begin() + fc + 4 * 12 * 6, 0.0f);
  EXPECT_EQ(full, without);
}

// ---------------------------------------------------------------------------------------------
// DDP with expert parallelism

// Catches: expert gradients reduced over dp_cp (or over nothing when edp has peers), buckets mixing experts with
// other parameters, a norm that counts an expert block once per ep rank or misses the others', an expert block
// saved by two ranks or none, and a memory model that counts every expert on every rank.
TEST(ExpertParallelDataParallel, ReducesExpertsOverEdpAndSavesEachBlockOnce) {
  Communicator& world = testing::world();
  const int n = world.size();
  std::vector<MeshShape> shapes = {shape(1, 1, n, 1, 1, n), shape(1, 1, n, 1, 1, 1)};
  if (n == 4) shapes.push_back(shape(1, 1, 4, 1, 1, 2)), shapes.push_back(shape(1, 1, 2, 1, 2, 2));
  for (const MeshShape& s : shapes) {
    const std::string what = s.str();
    DeviceMesh mesh(world, s);
    const int D = s.size(Axis::dp_cp), ep = s.ep;
    const testing::LedgerModelStates before = testing::LedgerModelStates::now();
    ParameterStore store = placed_store(mesh);
    Communicator& dp = mesh.axis(Axis::dp_cp);
    Communicator& edp = mesh.axis(Axis::edp);
    DataParallel ddp(store, dp, 64, AdamWConfig{}, DType::f32, edp);
    ddp.set_tensor_parallel(store, TensorParallel{&mesh.axis(Axis::tp)});
    if (ep > 1) ddp.set_expert_parallel(&mesh.axis(Axis::ep));
    const auto& params = store.params();
    ASSERT_GT(ddp.buckets().size(), 3u) << what;
    for (const GradientBucket& b : ddp.buckets()) {
      for (size_t p = b.first_param; p < b.end_param; ++p) {
        EXPECT_EQ(b.comm, ep > 1 && params[p].spec.expert ? &edp : &dp) << what << ": " << params[p].name();
      }
    }

    // Rank at dp_cp coordinate c (the same on its tp peers) sets element i of every
    // gradient to (c + 1) x (i % 5 + 1): integers, summed exactly.
    const int c = mesh.coord(Axis::dp_cp);
    ddp.zero_grads();
    for (const Parameter& p : params) {
      const std::vector<int64_t> index = logical_indices(p.spec.logical_shape, p.local_offset, p.local_shape);
      for (size_t k = 0; k < index.size(); ++k) p.grad_data()[k] = static_cast<float>((c + 1) * (index[k] % 5 + 1));
    }
    ddp.begin_backward(true);
    ddp.finish_backward();
    // Dense: the sum over dp_cp. Experts of ep coordinate k: over the coordinates c % ep == k.
    auto sum_over = [&](int k) {
      int64_t sum = 0;
      for (int d = 0; d < D; ++d) sum += k < 0 || d % ep == k ? d + 1 : 0;
      return sum;
    };
    double norm = 0;
    for (const Parameter& p : params) {
      const bool expert = ep > 1 && p.spec.expert;
      const std::vector<int64_t> index = logical_indices(p.spec.logical_shape, p.local_offset, p.local_shape);
      const int64_t local_sum = sum_over(expert ? mesh.coord(Axis::ep) : -1);
      int64_t wrong = 0;
      for (size_t k = 0; k < index.size(); ++k) wrong += p.grad_data()[k] != static_cast<float>(local_sum * (index[k] % 5 + 1));
      EXPECT_EQ(wrong, 0) << what << ": elements of the reduced gradient of " << p.name();
      const int64_t numel = shape_numel(p.spec.logical_shape), per_expert = numel / p.spec.logical_shape[0];
      for (int64_t i = 0; i < numel; ++i) {
        const int64_t g = sum_over(expert ? static_cast<int>(i / per_expert / (4 / ep)) : -1) * (i % 5 + 1);
        norm += static_cast<double>(g * g);
      }
    }
    EXPECT_NEAR(ddp.grad_norm(), std::sqrt(norm), 1e-6 * std::sqrt(norm)) << what;

    // Every element of every saved tensor written by exactly one rank.
    int64_t total = 0;
    for (const Parameter& p : params) total += shape_numel(p.spec.logical_shape);
    std::vector<int32_t> written(static_cast<size_t>(3 * total), 0);
    for (const StateSlice& slice : ddp.state_slices()) {
      if (!slice.saved) continue;
      int64_t base = slice.kind * total;
      for (const Parameter& p : params) {
        if (&p == slice.param) break;
        base += shape_numel(p.spec.logical_shape);
      }
      for (int64_t i : logical_indices(slice.param->spec.logical_shape, slice.offset(), slice.shape())) {
        ++written[static_cast<size_t>(base + i)];
      }
    }
    world.all_reduce(written.data(), written.size(), DType::i32, ReduceOp::sum);
    EXPECT_EQ(written, std::vector<int32_t>(written.size(), 1)) << what;

    ddp.step(1e-3f, 1.0f);
    testing::expect_model_states_since(
        before, predict_model_states(local_parameter_specs(expert_specs(), s.tp), 1, 0, DType::f32, ep), what);
  }
  EXPECT_EQ(error_of([] { predict_model_states(expert_specs(), 3, 1, DType::f32, 2); }),
            "ep = 2 does not divide dp_shard = 3: ZeRO stage 1 shards the experts over dp_shard / ep ranks");
}

// ---------------------------------------------------------------------------------------------
// parallelize()

// testing::tiny_run's GPT-2 with 4 experts of width 24, top-2.
ModelConfig tiny_moe() {
  ModelConfig c = testing::tiny_run("", 8, 0).model;
  c.n_experts = 4;
  c.moe_top_k = 2;
  c.moe_d_ff = 24;
  return c;
}

// Catches: ep accepted on a dense model or on experts it cannot split.
TEST(ExpertParallelParallelize, RefusesWhatItCannotRun) {
  Communicator& world = testing::world();
  DeviceMesh mesh(world, shape(1, 1, world.size(), 1, 1, 2));
  auto refusal = [&](ModelConfig config, int zero_stage) {
    Transformer model(config, 1, 256, /*materialize_parameters=*/false);
    ParallelOptions options;
    options.zero_stage = zero_stage;
    return error_of([&] { parallelize(model, mesh, options); });
  };
  ModelConfig dense = tiny_moe();
  dense.n_experts = 0;
  EXPECT_EQ(refusal(dense, 0), "parallel.ep = 2 needs a mixture-of-experts model (model.n_experts > 0)");
  ModelConfig three = tiny_moe();
  three.n_experts = 3;
  EXPECT_EQ(refusal(three, 0), "model.n_experts = 3 does not split over parallel.ep = 2");
  for (int stage : {1, 2, 3}) EXPECT_EQ(refusal(tiny_moe(), stage), "") << "zero stage " << stage;
}

// ---------------------------------------------------------------------------------------------
// ZeRO stages 1 to 3 and HSDP with expert parallelism

RunConfig sharded(RunConfig c, int stage, int dp_replicate, int dp_shard, int ep) {
  c.zero_stage = stage;
  c.mesh.dp_replicate = dp_replicate;
  c.mesh.dp_shard = dp_shard;
  c.mesh.ep = ep;
  return c;
}

class ZeroExpertParallel : public ::testing::TestWithParam<testing::Family> {
 protected:
  ZeroExpertParallel() { write_shard(dir_.file("train.bin"), testing::synthetic_text(30000, 29)); }
  RunConfig run() const { return testing::moe_run(dir_.file("train.bin"), GetParam().llama); }
  testing::TempDir dir_;
};

// Catches: experts sharded over all of dp_shard (rows of experts this rank does not hold), their gradients
// reduce-scattered over dp_shard (summing other experts' gradients in) or not summed over the ranks holding them,
// a gather or reduce-scatter mixing experts and dense parameters, HSDP not all-reducing the expert shards over
// replicas, the norm counting expert squares once per edp_shard rank or per ep rank.
TEST_P(ZeroExpertParallel, MatchesOneRank) {
  const int n = testing::world().size();
  const testing::TrainedRun reference = testing::train(run(), testing::one_rank_mesh());
  for (int stage : {1, 2, 3}) {
    const std::string what = "zero stage " + std::to_string(stage) + ", dp_shard=" + std::to_string(n) + ", ep=2";
    testing::expect_same_run(reference, testing::train_on_world(sharded(run(), stage, 1, n, 2)), what.c_str());
  }
  if (n == 4) {
    testing::expect_same_run(reference, testing::train_on_world(sharded(run(), 3, 2, 2, 2)), "HSDP 2 x 2, ep=2, zero stage 3");
    testing::expect_same_run(reference, testing::train_on_world(sharded(run(), 1, 2, 2, 2)), "HSDP 2 x 2, ep=2, zero stage 1");
    RunConfig tp = sharded(run(), 3, 1, 2, 2);  // experts split on ep, then on tp (dim 1 or 2); edp_shard alone
    tp.mesh.tp = 2;
    tp.sequence_parallel = true;
    testing::expect_same_run(reference, testing::train_on_world(tp), "FSDP x ep=2 x tp=2 (sequence parallel)");
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ZeroExpertParallel, ::testing::Values(testing::Family{"gpt2", false}, testing::Family{"llama", true}),
                         [](const auto& info) { return std::string(info.param.name); });

// After one step, each rank's parameters, gradients and moments against the memory model
// (dense parameters sharded over dp_shard, this rank's E / ep experts over dp_shard / ep).
// Catches: every expert counted on every rank, expert shards sized over dp_shard, whole expert gradients kept.
TEST(ZeroExpertParallelMemory, LedgerMatchesTheMemoryModel) {
  Communicator& world = testing::world();
  const int n = world.size();
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 31));
  for (int stage : {1, 2, 3}) {
    RunConfig c = sharded(testing::moe_run(dir.file("train.bin"), false), stage, 1, n, 2);
    c.model.max_seq_len = 18;  // padded shards
    c.steps = 1;
    DeviceMesh mesh(world, c.resolve_mesh(n));
    const testing::LedgerModelStates before = testing::LedgerModelStates::now();
    Trainer trainer(c, mesh, nullptr);
    trainer.step();
    const std::string what = "stage " + std::to_string(stage) + ", rank " + std::to_string(world.rank());
    testing::expect_model_states_since(before, predict_model_states(model_parameter_specs(c.model), n, stage, DType::f32, 2),
                                       what);
  }
  // The formula: stage 3 splits the experts over ep x (dp_shard / ep), the rest over dp_shard.
  std::vector<ParameterSpec> specs(2);
  specs[0].logical_shape = {8, 16};
  specs[1].logical_shape = {4, 6, 10};
  specs[1].expert = true;
  const ModelStateBytes m = predict_model_states(specs, 4, 3, DType::f32, 2);
  EXPECT_EQ(m.total(), 16 * (8 * 16 / 4 + 4 * 6 * 10 / 4));
  EXPECT_EQ(predict_model_states(specs, 4, 1, DType::f32, 2).optimizer, 8 * (8 * 16 / 4 + 4 * 6 * 10 / 4));
  EXPECT_EQ(predict_model_states(specs, 4, 0, DType::f32, 2).total(), 16 * (8 * 16 + 4 * 6 * 10 / 2));
}

// One FSDP step's traffic: the experts' gradients reduce-scattered over edp_shard, once
// per block, n_e x each rank's padded expert shards (their E / ep experts split over
// n_e = dp_shard / ep ranks); the dense parameters' over dp_shard, once per group,
// n x their padded shards; the experts' parameters all-gathered over edp_shard before
// each block's forward and backward.
// Catches: expert gradients reduced over dp_shard, or reduce-scattered with the dense ones, or twice.
TEST(ZeroExpertParallelComm, ExpertReduceScatterBytesOverEdpShard) {
  Communicator& world = testing::world();
  const int n = world.size(), ep = 2, n_e = n / ep;
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 37));
  const RunConfig c = sharded(testing::moe_run(dir.file("train.bin"), false), 3, 1, n, ep);
  DeviceMesh mesh(world, c.resolve_mesh(n));
  Trainer trainer(c, mesh, nullptr);
  int64_t expert_bytes = 0, dense_bytes = 0;  // reduce-scatter payloads: every rank's padded shards, fp32
  for (const ParameterSpec& s : model_parameter_specs(c.model)) {
    const int64_t rows = s.logical_shape[0], row_numel = shape_numel(s.logical_shape) / rows;
    if (s.expert) {
      expert_bytes += n_e * ((rows / ep + n_e - 1) / n_e) * row_numel * 4;
    } else {
      dense_bytes += n * ((rows + n - 1) / n) * row_numel * 4;
    }
  }
  const CommStats experts_before = mesh.axis(Axis::edp_shard).stats();
  const CommStats dense_before = mesh.axis(Axis::dp_shard).stats();
  trainer.step();
  const CommCounter experts = mesh.axis(Axis::edp_shard).stats()[CommOp::reduce_scatter];
  const CommCounter dense = mesh.axis(Axis::dp_shard).stats()[CommOp::reduce_scatter];
  const int blocks = c.model.n_layer;
  EXPECT_EQ(experts.calls - experts_before[CommOp::reduce_scatter].calls, blocks);
  EXPECT_EQ(experts.payload_bytes - experts_before[CommOp::reduce_scatter].payload_bytes, expert_bytes);
  EXPECT_EQ(experts.wire_bytes - experts_before[CommOp::reduce_scatter].wire_bytes, expert_bytes * (n_e - 1) / n_e);
  EXPECT_EQ(dense.calls - dense_before[CommOp::reduce_scatter].calls, blocks + 1);
  EXPECT_EQ(dense.payload_bytes - dense_before[CommOp::reduce_scatter].payload_bytes, dense_bytes);
  const CommCounter gathers = mesh.axis(Axis::edp_shard).stats()[CommOp::all_gather];
  EXPECT_EQ(gathers.calls - experts_before[CommOp::all_gather].calls, 2 * blocks);
  EXPECT_EQ(gathers.payload_bytes - experts_before[CommOp::all_gather].payload_bytes, 2 * expert_bytes);
}

// Saved under FSDP x ep = 2, resumed on one rank and under DDP x ep = world: each expert
// shard is written once, as its box of the logical tensor, and read back into whatever
// split the new run has.
// Catches: an expert shard saved at its row within the rank's experts instead of within all experts, saved by
// two ranks or none, moments not resharded.
TEST(ZeroExpertParallelCheckpoint, FsdpShardsResumeOnOtherLayouts) {
  Communicator& world = testing::world();
  const int n = world.size();
  testing::SharedDir dir(world);
  testing::TempDir data, own;
  write_shard(data.file("train.bin"), testing::synthetic_text(30000, 41));
  auto config = [&](int stage, int dp_shard, int ep, const std::filesystem::path& folder) {
    RunConfig c = sharded(testing::moe_run(data.file("train.bin"), true), stage, 1, dp_shard, ep);
    c.checkpoint_dir = folder.string();
    return c;
  };
  const testing::TrainedRun reference = testing::train_until(config(0, 1, 1, own.path()), testing::one_rank_mesh(), 20, "", false);
  {
    const RunConfig c = config(3, n, 2, dir.path());
    DeviceMesh mesh(world, c.resolve_mesh(n));
    testing::train_until(c, mesh, 10, "", true);
  }
  const std::string saved_step = (dir.path() / ckpt::checkpoint_dir_name(10)).string();
  testing::expect_resumed(reference, testing::train_until(config(0, 1, 1, own.path()), testing::one_rank_mesh(), 20, saved_step, false),
                          10, "one rank");
  const RunConfig c = config(0, n, n, dir.path());
  DeviceMesh mesh(world, c.resolve_mesh(n));
  testing::expect_resumed(reference, testing::train_until(c, mesh, 20, "latest", false), 10, ("DDP, ep=" + std::to_string(n)).c_str());
}

}  // namespace
}  // namespace ndt
