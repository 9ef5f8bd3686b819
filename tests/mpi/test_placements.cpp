// Placements as the single truth: for every parameter of GPT-2 and Llama under DDP, FSDP,
// tp and tp with sequence parallel, the placements parallelize() declared explain
//   - the block each rank holds (its shape, its offset, and its values: those of the
//     same elements of the one-rank model),
//   - the groups its gradient was reduced over, as the communication counters saw them,
//   - the checkpoint slices (the rows each rank holds, and every element of every
//     tensor saved by exactly one rank),
// and the gradient norm (each element counted once) equals the one-rank norm.
#include "../common/one_rank_mesh.h"
#include "comm/device_mesh.h"
#include "core/rng.h"
#include "mpi_env.h"
#include "parallel/parallelize.h"
#include "parallel/data/shard_layout.h"
#include "parallel/tensor/tensor_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace ndt {
namespace {

struct Layout {
  const char* name;
  bool llama;
  enum Kind { dp, fsdp, tp, tp_sp } kind;
};
void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }

ModelConfig model_of(bool llama) {
  ModelConfig c = ModelConfig::preset("gpt2-tiny");
  c.n_layer = 2;
  c.d_model = 32;
  c.d_ff = 128;
  c.n_head = 4;
  c.n_kv_head = 4;
  c.max_seq_len = 18;  // 18 positions: padded FSDP shards on 4 ranks
  c.vocab_size = 260;  // 65 rows per rank on 4: neither a power of two nor padded evenly on 8
  if (llama) {
    c.arch = Arch::llama;
    c.tied_embeddings = false;
    c.n_head = 8;
    c.n_kv_head = 4;
    c.d_ff = 96;
    c.qk_norm = true;
  }
  return c;
}

std::vector<int32_t> global_tokens(int rows, int T, int vocab, uint64_t stream) {
  std::vector<int32_t> t(static_cast<size_t>(rows) * T + 1);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(philox(11, stream, i)[0] % vocab);
  return t;
}

class Placements : public ::testing::TestWithParam<Layout> {};

// Catches: a placement disagreeing with a rank's block, its gradient's reduction group, checkpoint slice or the norm.
TEST_P(Placements, ExplainBlocksReductionsAndCheckpointSlices) {
  Communicator& world = testing::world();
  const int n = world.size();
  const Layout layout = GetParam();
  const ModelConfig c = model_of(layout.llama);
  MeshShape shape;
  if (layout.kind == Layout::dp) shape.dp_replicate = n;
  if (layout.kind == Layout::fsdp) shape.dp_shard = n;
  if (layout.kind == Layout::tp || layout.kind == Layout::tp_sp) shape.tp = n;
  DeviceMesh mesh(world, shape);
  ParallelOptions options;
  options.zero_stage = layout.kind == Layout::fsdp ? 3 : 0;
  options.sequence_parallel = layout.kind == Layout::tp_sp;
  options.bucket_bytes = 4096;

  Transformer model(c, 3, 256, /*materialize_parameters=*/false);
  std::unique_ptr<GradientSync> sync = parallelize(model, mesh, options);
  Transformer reference(c, 3);
  std::unique_ptr<GradientSync> reference_sync = parallelize(reference, testing::one_rank_mesh(), {});
  const auto& params = model.store().params();

  // 1. Blocks: the shards on tp are local_shape/local_offset; the shard on dp_shard is
  // the rows the layout holds (as its checkpoint slices say, checked below).
  for (const Parameter& p : params) {
    Shape local = p.spec.logical_shape, offset(local.size(), 0);
    for (const Placement& placement : p.placements) {
      ASSERT_EQ(placement.kind, Placement::Kind::shard) << p.name();
      if (placement.axis == Axis::dp_shard) continue;
      local[placement.dim] /= mesh.size(placement.axis);
      offset[placement.dim] = local[placement.dim] * mesh.coord(placement.axis);
    }
    EXPECT_EQ(p.local_shape, local) << p.name();
    EXPECT_EQ(p.local_offset, offset) << p.name();
    // The declaration: a Megatron layer's weight is split on tp, the rest replicated.
    EXPECT_EQ(p.sharded_on(Axis::tp), shape.tp > 1 && p.spec.tp_dim >= 0) << p.name();
  }
  // Whole values, joined from the blocks the placements describe, are the one-rank model's.
  const std::vector<float> joined = gather_tensor_parallel(model.store(), sync->full_parameters().data(),
                                                           TensorParallel{&mesh.axis(Axis::tp)});
  const float* ref = reference.store().values().data<float>();
  ASSERT_EQ(static_cast<int64_t>(joined.size()), reference.store().numel());
  for (size_t i = 0; i < joined.size(); ++i) ASSERT_EQ(joined[i], ref[i]) << "element " << i;

  // 2. One step on the global batch: dp ranks take their rows, tp peers share theirs.
  const int B = 2, T = 8, dp = mesh.size(Axis::dp), rows = B * dp;
  const float scale = 1.0f / static_cast<float>(rows * T);
  const auto tokens = global_tokens(rows, T, c.vocab_size, layout.llama ? 2 : 1);
  std::map<Axis, CommStats> before;
  for (Axis a : {Axis::dp, Axis::dp_replicate, Axis::dp_shard, Axis::tp}) before[a] = mesh.axis(a).stats();
  sync->zero_grads();
  sync->begin_backward(true);
  const int32_t* mine = tokens.data() + int64_t{mesh.coord(Axis::dp)} * B * T;
  model.forward_backward(mine, mine + 1, B, T, scale);
  sync->finish_backward();
  const double norm = sync->grad_norm();
  auto payload = [&](Axis a, CommOp op) { return mesh.axis(a).stats()[op].payload_bytes - before[a][op].payload_bytes; };

  // Gradient bytes each axis reduced, from the placements: Partial over dp_replicate
  // (DDP's all-reduce), over dp_shard (FSDP's reduce-scatter of the padded shards of
  // every rank), over tp (the partial replicated gradients).
  const ShardLayout shards(model.store(), mesh.coord(Axis::dp_shard), mesh.size(Axis::dp_shard));
  int64_t over_dp = 0, over_dp_shard = 0, over_tp = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter& p = params[i];
    if (p.grad_partial_on(Axis::dp_replicate)) over_dp += 4 * p.numel();
    if (p.grad_partial_on(Axis::dp_shard)) over_dp_shard += 4 * n * shards.shard(i).padded_numel();
    if (p.grad_partial_on(Axis::tp)) over_tp += 4 * p.numel();
    EXPECT_EQ(p.grad_partial_on(Axis::dp_replicate), shape.dp_replicate > 1) << p.name();
    EXPECT_EQ(p.grad_partial_on(Axis::dp_shard), shape.dp_shard > 1) << p.name();
  }
  EXPECT_EQ(payload(Axis::dp, CommOp::all_reduce), over_dp);
  EXPECT_EQ(payload(Axis::dp_shard, CommOp::reduce_scatter), over_dp_shard);
  if (shape.tp > 1) {
    // Besides the partial gradients: the vocab-parallel loss (3 floats a row in one
    // chunk), the norm's one float and, without sequence parallel, the 4L + 2 region
    // all-reduces of N x C activations.
    const int64_t N = int64_t{B} * T, L = c.n_layer;
    const int64_t activations = options.sequence_parallel ? 0 : (4 * L + 2) * N * c.d_model * 4;
    EXPECT_EQ(payload(Axis::tp, CommOp::all_reduce), activations + 3 * N * 4 + over_tp + 4);
    // Which replicated parameters are partial: QK-norm always; under sequence parallel
    // every replicated one.
    for (const Parameter& p : params) {
      const bool replicated = !p.sharded_on(Axis::tp);
      EXPECT_EQ(p.grad_partial_on(Axis::tp), replicated && (options.sequence_parallel || p.spec.tp_region))
          << p.name();
    }
  } else {
    EXPECT_EQ(over_tp, 0);
  }

  // The norm counts every element once: the one-rank norm on the whole batch.
  reference_sync->zero_grads();
  reference_sync->begin_backward(true);
  reference.forward_backward(tokens.data(), tokens.data() + 1, rows, T, scale);
  reference_sync->finish_backward();
  EXPECT_NEAR(norm, reference_sync->grad_norm(), 1e-5 * norm);

  // 3. Checkpoint slices: each rank's rows are its block (dp_shard: ceil(R / n) rows a
  // rank, clipped), and over all ranks every element of every tensor is saved once.
  std::map<std::string, int64_t> saved_elements;
  for (const StateSlice& s : sync->state_slices()) {
    const Parameter& p = *s.param;
    const size_t i = static_cast<size_t>(&p - params.data());
    if (p.sharded_on(Axis::dp_shard)) {
      EXPECT_EQ(s.row_begin, shards.shard(i).begin_row) << s.tensor_name();
      EXPECT_EQ(s.row_end, shards.shard(i).end_row) << s.tensor_name();
    } else {
      EXPECT_EQ(s.row_begin, 0) << s.tensor_name();
      EXPECT_EQ(s.row_end, p.local_shape[0]) << s.tensor_name();
    }
    EXPECT_EQ(s.offset()[0], p.local_offset[0] + s.row_begin) << s.tensor_name();
    if (s.saved) saved_elements[s.tensor_name()] += shape_numel(s.shape());
  }
  for (const Parameter& p : params) {
    for (const std::string& name : {p.name(), "optim.exp_avg." + p.name(), "optim.exp_avg_sq." + p.name()}) {
      float count = static_cast<float>(saved_elements[name]);
      world.all_reduce(&count, 1, DType::f32, ReduceOp::sum);
      EXPECT_EQ(static_cast<int64_t>(count), shape_numel(p.spec.logical_shape)) << name << " on " << layout.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, Placements,
                         ::testing::Values(Layout{"gpt2_dp", false, Layout::dp}, Layout{"gpt2_fsdp", false, Layout::fsdp},
                                           Layout{"gpt2_tp", false, Layout::tp}, Layout{"gpt2_tp_sp", false, Layout::tp_sp},
                                           Layout{"llama_dp", true, Layout::dp}, Layout{"llama_fsdp", true, Layout::fsdp},
                                           Layout{"llama_tp", true, Layout::tp}, Layout{"llama_tp_sp", true, Layout::tp_sp}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ndt
