// Context parallelism (docs/context_parallel.md): ring attention, Ulysses and USP (on 4
// ranks: 2 x 2; its training tests in test_usp.cpp) alone against whole-sequence attention; training on cp = world ranks against one rank for
// both families and both modes; composed with DDP, FSDP, tensor + sequence parallel and
// pipeline parallel; the bytes a step sends on cp against the theory; activation
// memory against the prediction and its 1/cp scaling; the causal work per rank.
#include "../common/one_rank_mesh.h"
#include "../common/gradcheck.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "kernels/kernels.h"
#include "mpi_env.h"
#include "parallel/parallelize.h"
#include "parallel/context/ring_attention.h"
#include "parallel/context/ulysses_attention.h"
#include "parallel/context/usp_attention.h"
#include "parity.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace ndt {
namespace {

using testing::expect_same_run;
using testing::random_vector;
using testing::tiny_run;
using testing::train;

// --- The attention alone -------------------------------------------------------------

struct AttentionCase {
  const char* name;
  CpMode mode;
  CpChunks chunks;
  int NKV;
  int ulysses = 1;  // USP: parallel.cp_ulysses
};
void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.name; }

class ContextParallelAttentionTest : public ::testing::TestWithParam<AttentionCase> {};

// Rows of a [B, T, H, HS] tensor at the given positions of every sequence.
std::vector<float> rows_at(const std::vector<float>& whole, const std::vector<int32_t>& positions, int B, int T,
                           int64_t width) {
  const int local = static_cast<int>(positions.size());
  std::vector<float> out(static_cast<size_t>(B) * local * width);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < local; ++t) {
      std::copy_n(whole.begin() + (int64_t{b} * T + positions[t]) * width, width,
                  out.begin() + (int64_t{b} * local + t) * width);
    }
  }
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-6 * (1.0 + std::fabs(want[i]))) << what << " element " << i;
  }
}

// Random q, k, v and output gradient, the same on every rank: the whole-sequence kernel's
// output and gradients, restricted to this rank's rows, against the context-parallel
// forward and backward on those rows. Chunks of 37 tokens: no multiple of the kernel's
// row block of 64.
// Catches: a K/V block merged with the wrong rows or positions, a mask off by one, a dK/dV sum not returned home.
TEST_P(ContextParallelAttentionTest, EqualsWholeSequenceAttention) {
  Communicator& world = testing::world();
  const AttentionCase& c = GetParam();
  const int n = world.size(), B = 2, NH = 8, NKV = c.NKV, HS = 16;
  if (c.mode == CpMode::usp && (n <= c.ulysses || n % c.ulysses != 0)) GTEST_SKIP() << "USP needs a ring of 2 or more";
  const CpLayout layout{n, c.mode, c.chunks, c.ulysses};
  MeshShape shape;
  shape.cp = n, shape.cp_ulysses = c.ulysses;
  DeviceMesh mesh(world, shape);
  const int T = layout.chunk_count() * 37, local = T / n;
  const int64_t QD = int64_t{NH} * HS, KD = int64_t{NKV} * HS;
  const auto q = random_vector(int64_t{B} * T * QD, 1), k = random_vector(int64_t{B} * T * KD, 2),
             v = random_vector(int64_t{B} * T * KD, 3), dout = random_vector(int64_t{B} * T * QD, 4);
  std::vector<float> out(q.size()), lse(size_t(B) * NH * T), att(size_t(B) * NH * T * T);
  std::vector<float> dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
  kernels::attention_forward(out.data(), lse.data(), att.data(), q.data(), k.data(), v.data(), nullptr, B, T, NH, NKV, HS);
  kernels::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), att.data(), nullptr,
                              B, T, NH, NKV, HS);

  const std::vector<int32_t> positions = layout.positions(world.rank(), T);
  const auto lq = rows_at(q, positions, B, T, QD), lk = rows_at(k, positions, B, T, KD),
             lv = rows_at(v, positions, B, T, KD), ldout = rows_at(dout, positions, B, T, QD);
  std::unique_ptr<ContextParallelAttention> attention;
  Communicator& cp = mesh.axis(Axis::cp);
  if (c.mode == CpMode::ring) {
    attention = std::make_unique<RingAttention>(cp, layout);
  } else if (c.mode == CpMode::ulysses) {
    attention = std::make_unique<UlyssesAttention>(cp, layout);
  } else {
    attention = std::make_unique<UspAttention>(cp, mesh.axis(Axis::cp_ulysses), mesh.axis(Axis::cp_ring), layout);
  }
  std::vector<float> lout(lq.size()), llse(size_t(B) * NH * local),
      latt(static_cast<size_t>(attention_probability_floats(layout, DType::f32, B, local, NH))),
      scratch(static_cast<size_t>(context_parallel_scratch_floats(layout, B, local, NH, NKV, HS)));
  attention->forward({lout.data(), llse.data(), latt.data(), lq.data(), lk.data(), lv.data(), B, local, NH, NKV, HS,
                      scratch.data()});
  expect_close(lout, rows_at(out, positions, B, T, QD), "output");
  // Backward adds: start from 1 to see it.
  std::vector<float> ldq(lq.size(), 1.0f), ldk(lk.size(), 1.0f), ldv(lv.size(), 1.0f);
  attention->backward({ldq.data(), ldk.data(), ldv.data(), ldout.data(), lq.data(), lk.data(), lv.data(), latt.data(),
                       lout.data(), llse.data(), B, local, NH, NKV, HS, scratch.data()});
  for (auto* g : {&ldq, &ldk, &ldv}) {
    for (float& x : *g) x -= 1.0f;
  }
  // The subtraction of 1 costs up to 6e-8 of absolute rounding: within the tolerance.
  expect_close(ldq, rows_at(dq, positions, B, T, QD), "dq");
  expect_close(ldk, rows_at(dk, positions, B, T, KD), "dk");
  expect_close(ldv, rows_at(dv, positions, B, T, KD), "dv");
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ContextParallelAttentionTest,
    ::testing::Values(AttentionCase{"ring_zigzag", CpMode::ring, CpChunks::zigzag, 8},
                      AttentionCase{"ring_zigzag_gqa", CpMode::ring, CpChunks::zigzag, 4},
                      AttentionCase{"ring_contiguous_gqa", CpMode::ring, CpChunks::contiguous, 4},
                      AttentionCase{"ulysses_zigzag", CpMode::ulysses, CpChunks::zigzag, 8},
                      AttentionCase{"ulysses_contiguous_gqa", CpMode::ulysses, CpChunks::contiguous, 4},
                      AttentionCase{"usp_zigzag", CpMode::usp, CpChunks::zigzag, 8, 2},
                      AttentionCase{"usp_contiguous_gqa", CpMode::usp, CpChunks::contiguous, 4, 2}),
    [](const auto& info) { return std::string(info.param.name); });

// The visible query-key pairs each rank's ring attention computes (its attention FLOPs
// are 4 x head size x these): equal within 5% across ranks with zigzag chunks; with
// contiguous ones the last rank has 2 cp - 1 times the first's.
// Catches: a zigzag layout that does not balance the causal work (or a contiguous one mistaken for it).
TEST(ContextParallelLoadBalance, ZigzagEvensTheCausalWork) {
  Communicator& world = testing::world();
  const int n = world.size(), B = 1, NH = 2, NKV = 2, HS = 8;
  for (CpChunks chunks : {CpChunks::zigzag, CpChunks::contiguous}) {
    const CpLayout layout{n, CpMode::ring, chunks};
    const int T = 2 * n * 40, local = T / n;
    RingAttention ring(world, layout);
    const auto q = random_vector(int64_t{B} * local * NH * HS, 5), k = random_vector(int64_t{B} * local * NKV * HS, 6);
    std::vector<float> out(q.size()), lse(size_t(B) * NH * local),
        att(static_cast<size_t>(attention_probability_floats(layout, DType::f32, B, local, NH))),
        scratch(static_cast<size_t>(context_parallel_scratch_floats(layout, B, local, NH, NKV, HS)));
    ring.forward({out.data(), lse.data(), att.data(), q.data(), k.data(), k.data(), B, local, NH, NKV, HS,
                  scratch.data()});
    // Counts below 2^31 here: gathered as i32.
    std::vector<int32_t> pairs(static_cast<size_t>(n));
    const int32_t mine = static_cast<int32_t>(ring.score_pairs());
    world.all_gather(&mine, pairs.data(), 1, DType::i32);
    int64_t total = 0;
    for (int32_t p : pairs) total += p;
    EXPECT_EQ(total, int64_t{B} * NH * T * (T + 1) / 2) << "every visible pair once";
    const auto [lo, hi] = std::minmax_element(pairs.begin(), pairs.end());
    const double spread = static_cast<double>(*hi) / static_cast<double>(*lo);
    if (chunks == CpChunks::zigzag) {
      EXPECT_LT(spread, 1.05) << "zigzag: the most loaded rank over the least";
    } else {
      EXPECT_GT(spread, 2.0) << "contiguous: the last rank does 2cp-1 times the first's work";
    }
  }
}

// --- Training against one rank ----------------------------------------------------

struct Family {
  const char* name;
  bool llama;
  CpMode mode;
};
void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }

class ContextParallelTest : public ::testing::TestWithParam<Family> {
 protected:
  ContextParallelTest() { write_shard(dir_.file("train.bin"), testing::synthetic_text(30000, 7)); }
  RunConfig run() const { return testing::long_context_run(dir_.file("train.bin"), GetParam().llama); }
  RunConfig cp_run(int cp) const {
    RunConfig c = run();
    c.mesh.cp = cp;
    c.cp_mode = GetParam().mode;
    return c;
  }
  testing::TempDir dir_;
};

// Catches: positions not following the tokens, a loss or gradient not averaged over cp, gradients not reduced over cp.
TEST_P(ContextParallelTest, MatchesOneRank) {
  Communicator& world = testing::world();
  const testing::TrainedRun reference = train(run(), testing::one_rank_mesh());
  const RunConfig config = cp_run(world.size());
  DeviceMesh mesh(world, config.resolve_mesh(world.size()));
  expect_same_run(reference, train(config, mesh), ("cp=" + std::to_string(world.size())).c_str());
}

// Catches: cp ranks left out of the data-parallel reduction or sharding, tokens split over tp and cp inconsistently.
TEST_P(ContextParallelTest, ComposesWithDataFsdpTensorAndPipelineParallel) {
  Communicator& world = testing::world();
  if (world.size() != 4) GTEST_SKIP() << "cp = 2 with a second axis of 2 needs 4 ranks";
  const testing::TrainedRun reference = train(run(), testing::one_rank_mesh());
  {
    RunConfig config = cp_run(2);  // dp_replicate = 2 (DDP) x cp = 2, two micro-steps
    config.micro_batch_size = 1;
    DeviceMesh mesh(world, config.resolve_mesh(4));
    expect_same_run(reference, train(config, mesh), "ddp=2 x cp=2, accumulation");
  }
  {
    RunConfig config = cp_run(2);  // selective recompute reruns the ring / all-to-alls in backward
    config.activation_checkpointing.mode = CheckpointMode::selective;
    DeviceMesh mesh(world, config.resolve_mesh(4));
    expect_same_run(reference, train(config, mesh), "ddp=2 x cp=2, selective recompute");
  }
  {
    RunConfig config = cp_run(2);  // FSDP over dp_shard x cp = 4
    config.mesh.dp_shard = 2;
    config.zero_stage = 3;
    DeviceMesh mesh(world, config.resolve_mesh(4));
    expect_same_run(reference, train(config, mesh), "fsdp=2 x cp=2");
  }
  {
    RunConfig config = cp_run(2);
    config.mesh.tp = 2;
    config.sequence_parallel = true;
    DeviceMesh mesh(world, config.resolve_mesh(4));
    expect_same_run(reference, train(config, mesh), "cp=2 x tp=2 (sequence parallel)");
  }
  {
    RunConfig config = cp_run(2);
    config.mesh.pp = 2;
    config.micro_batch_size = 1;
    DeviceMesh mesh(world, config.resolve_mesh(4));
    expect_same_run(reference, train(config, mesh), "pp=2 x cp=2");
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ContextParallelTest,
                         ::testing::Values(Family{"gpt2_ring", false, CpMode::ring},
                                           Family{"gpt2_ulysses", false, CpMode::ulysses},
                                           Family{"llama_ring", true, CpMode::ring},
                                           Family{"llama_ulysses", true, CpMode::ulysses}),
                         [](const auto& info) { return std::string(info.param.name); });

// The 3-D layout cp = 2 x fsdp = 2 x tp = 2 (with sequence parallel) on 8 ranks.
// Catches: the flattened dp_shard x cp group built from the wrong ranks when tp is innermost.
TEST(ContextParallel3D, CpFsdpTpOnEightRanks) {
  Communicator& world = testing::world();
  if (world.size() != 8) GTEST_SKIP() << "needs 8 ranks";
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 8));
  for (bool llama : {false, true}) {
    RunConfig base = testing::long_context_run(dir.file("train.bin"), llama);
    base.steps = 10;
    const testing::TrainedRun reference = train(base, testing::one_rank_mesh());
    RunConfig config = base;
    config.mesh.cp = 2;
    config.mesh.dp_shard = 2;
    config.zero_stage = 3;
    config.mesh.tp = 2;
    config.sequence_parallel = true;
    DeviceMesh mesh(world, config.resolve_mesh(8));
    expect_same_run(reference, train(config, mesh), llama ? "llama cp x fsdp x tp" : "gpt2 cp x fsdp x tp");
  }
}

// --- Communication and memory ----------------------------------------------------

// One training step's traffic on cp (GPT-2 shape: KD = QD = d_model; L blocks; this
// rank's N = B x T / cp rows; 4-byte floats):
//   ring: sends of 2 N KD floats, per block (cp - 1) in forward, (cp - 1) + cp in backward;
//   Ulysses: per block, 4 all-to-alls of N (QD + KD + KD + QD) floats in forward and 8
//     of N (4 QD + 4 KD) in backward (q, k, v, output, output gradient in; dq, dk, dv
//     back), each sending (cp - 1) / cp of its buffer.
// Nothing else travels on cp.
// Catches: an extra or missing ring step, a K/V block re-sent, an all-to-all of the wrong width.
TEST(ContextParallelComm, BytesPerStepMatchTheory) {
  Communicator& world = testing::world();
  const int n = world.size();
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 9));
  for (CpMode mode : {CpMode::ring, CpMode::ulysses}) {
    RunConfig c = testing::long_context_run(dir.file("train.bin"), false);
    c.mesh.cp = n;
    c.cp_mode = mode;
    c.steps = 1;
    DeviceMesh mesh(world, c.resolve_mesh(n));
    Trainer trainer(c, mesh, nullptr);
    const CommStats before = mesh.axis(Axis::cp).stats();
    trainer.step();
    const CommStats& after = mesh.axis(Axis::cp).stats();
    auto delta = [&](CommOp op) {
      return std::pair{after[op].calls - before[op].calls, after[op].payload_bytes - before[op].payload_bytes};
    };
    const int64_t L = c.model.n_layer, D = c.model.d_model, N = int64_t{c.batch_size} * c.seq_len / n;
    if (mode == CpMode::ring) {
      const int64_t sends = L * ((n - 1) + (n - 1) + n);
      EXPECT_EQ(delta(CommOp::send), std::pair(sends, sends * 2 * N * D * 4)) << "ring";
      EXPECT_EQ(delta(CommOp::all_to_all).first, 0) << "ring";
    } else {
      const int64_t calls = L * (4 + 8);
      const int64_t payload = L * N * (4 * D + 8 * D) * 4;
      EXPECT_EQ(delta(CommOp::all_to_all), std::pair(calls, payload)) << "ulysses";
      EXPECT_EQ(after[CommOp::all_to_all].wire_bytes - before[CommOp::all_to_all].wire_bytes, payload * (n - 1) / n);
      EXPECT_EQ(delta(CommOp::send).first, 0) << "ulysses";
    }
    for (CommOp op : {CommOp::all_reduce, CommOp::all_gather, CommOp::reduce_scatter}) {
      EXPECT_EQ(delta(op).first, 0) << comm_op_name(op) << " on cp";
    }
  }
}

// The activation ledger of one micro-batch equals the prediction on every rank (USP on
// 4 ranks: 2 x 2), and
// the prediction falls as 1/cp (within 10% from cp = 2 to 16; the loss's logits chunk
// does not shrink): no probabilities are kept (backward recomputes them), everything
// else is T / cp rows.
// Catches: a context or workspace sized for the whole sequence, scratch the prediction does not count.
TEST(ContextParallelMemory, ActivationsFollowThePredictionAndScaleAsOneOverCp) {
  Communicator& world = testing::world();
  const int n = world.size();
  RunConfig c = tiny_run("", 2, 0);
  c.model.max_seq_len = 512;
  const int T = 512, B = 2;
  for (CpMode mode : {CpMode::ring, CpMode::ulysses, CpMode::usp}) {
    if (mode == CpMode::usp && n != 4) continue;  // USP: 2 x 2
    const int ulysses = mode == CpMode::usp ? 2 : 1;
    MeshShape shape{1, 1, 1, n, 1};
    shape.cp_ulysses = ulysses;
    DeviceMesh mesh(world, shape);
    const size_t before = MemoryLedger::instance().current(MemTag::activations);
    int64_t predicted = 0;
    {
      Transformer model(c.model, 1, c.loss_chunk_rows, /*materialize_parameters=*/false);
      ParallelOptions options;
      options.cp_mode = mode;
      auto sync = parallelize(model, mesh, options);
      std::vector<int32_t> tokens(size_t(B) * T);
      for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7) % c.model.vocab_size);
      sync->zero_grads();
      sync->begin_backward(true);
      model.forward_backward(tokens.data(), tokens.data(), B, T, 1.0f / (B * T));
      sync->finish_backward();
      const ActivationLayout layout = model.activation_layout();
      predicted = Transformer::predict_activation_bytes(c.model, B, T, c.loss_chunk_rows, layout);
      EXPECT_EQ(static_cast<int64_t>(MemoryLedger::instance().current(MemTag::activations) - before), predicted)
          << cp_mode_name(mode) << " rank " << world.rank();
    }
    // cp = 1 keeps the T x T probabilities per head (the local kernel): more than cp x
    // this rank's share.
    const int64_t whole = Transformer::predict_activation_bytes(c.model, B, T, c.loss_chunk_rows, {});
    EXPECT_LT(predicted * n, whole) << cp_mode_name(mode);
    // From cp = 2 on (USP: 4), cp x (the activations per rank) stays within 10% of
    // cp = 2's (it grows a little: the loss's logits chunk does not shrink).
    auto at = [&](int cp) {
      const ActivationLayout layout{1, false, CpLayout{cp, mode, CpChunks::zigzag, ulysses}};
      return static_cast<double>(Transformer::predict_activation_bytes(c.model, B, T, c.loss_chunk_rows, layout));
    };
    const int first = 2 * ulysses;
    for (int cp : {4, 8, 16}) {
      if (cp <= first) continue;
      const double scaled = cp * at(cp) / (first * at(first));
      EXPECT_GE(scaled, 1.0) << cp_mode_name(mode) << " cp = " << cp;
      EXPECT_LT(scaled, 1.1) << cp_mode_name(mode) << " cp = " << cp;
    }
  }
}

}  // namespace
}  // namespace ndt
