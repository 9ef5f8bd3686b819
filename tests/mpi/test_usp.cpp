// USP (parallel.cp_mode = "usp", docs/context_parallel.md): cp = 4 as 2 Ulysses ranks x a
// ring of 2 on 4 ranks. Training against one rank for both families and both chunk
// layouts; the bytes a step sends on cp_ulysses and cp_ring against the theory; the
// rows each rank holds. (The attention alone and the activation ledger:
// test_context_parallel.cpp; compositions with FSDP and tp: the feature matrix on 8
// ranks; document boundaries: test_document_boundaries.cpp.)
#include "../common/one_rank_mesh.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "mpi_env.h"
#include "parity.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <tuple>
#include <vector>

namespace ndt {
namespace {

struct UspCase {
  const char* name;
  bool llama;
  CpChunks chunks;
};
void PrintTo(const UspCase& c, std::ostream* os) { *os << c.name; }

RunConfig usp_run(const RunConfig& base, CpChunks chunks) {
  RunConfig c = base;
  c.mesh.cp = 4;
  c.mesh.cp_ulysses = 2;
  c.cp_mode = CpMode::usp;
  c.cp_chunks = chunks;
  return c;
}

class UspTest : public ::testing::TestWithParam<UspCase> {};

// Catches: rows gathered out of the ring position's order, a ring run over the wrong
// ranks or positions, heads split over the wrong group, a gradient not returned home.
TEST_P(UspTest, MatchesOneRank) {
  Communicator& world = testing::world();
  if (world.size() != 4) GTEST_SKIP() << "USP 2 x 2 needs 4 ranks";
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 31));
  const RunConfig base = testing::long_context_run(dir.file("train.bin"), GetParam().llama);
  const testing::TrainedRun reference = testing::train(base, testing::one_rank_mesh());
  const RunConfig config = usp_run(base, GetParam().chunks);
  DeviceMesh mesh(world, config.resolve_mesh(4));
  testing::expect_same_run(reference, testing::train(config, mesh), GetParam().name);
}

INSTANTIATE_TEST_SUITE_P(Layouts, UspTest,
                         ::testing::Values(UspCase{"gpt2_zigzag", false, CpChunks::zigzag},
                                           UspCase{"gpt2_contiguous", false, CpChunks::contiguous},
                                           UspCase{"llama_zigzag", true, CpChunks::zigzag},
                                           UspCase{"llama_contiguous", true, CpChunks::contiguous}),
                         [](const auto& info) { return std::string(info.param.name); });

// One training step's traffic (L blocks; this rank's N = B x T / cp rows; QD = heads x
// head size, KD = KV heads x head size; cu = cr = 2; 4-byte floats):
//   cp_ulysses: per block 4 all-to-alls of N (2 QD + 2 KD) floats in all in forward and 8
//     of N (4 QD + 4 KD) in backward, each sending (cu - 1) / cu of its buffer;
//   cp_ring: per block (cr - 1) sends of the K/V block (cu x N rows of KD / cu: 2 N KD
//     floats) in forward, (cr - 1) + cr in backward;
//   cp itself: nothing (the attentions run on its two parts).
// Catches: an all-to-all over the whole cp group, a ring over cp, a K/V block of the
// wrong width, a missing or extra ring step.
TEST(UspComm, BytesPerStepMatchTheoryPerAxis) {
  Communicator& world = testing::world();
  if (world.size() != 4) GTEST_SKIP() << "USP 2 x 2 needs 4 ranks";
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 32));
  for (bool llama : {false, true}) {
    RunConfig c = usp_run(testing::long_context_run(dir.file("train.bin"), llama), CpChunks::zigzag);
    c.steps = 1;
    DeviceMesh mesh(world, c.resolve_mesh(4));
    Trainer trainer(c, mesh, nullptr);
    std::array<CommStats, 3> before;
    const Axis axes[3] = {Axis::cp, Axis::cp_ulysses, Axis::cp_ring};
    for (int a = 0; a < 3; ++a) before[a] = mesh.axis(axes[a]).stats();
    trainer.step();
    auto delta = [&](int a, CommOp op) {
      const CommStats& after = mesh.axis(axes[a]).stats();
      return std::tuple{after[op].calls - before[a][op].calls, after[op].payload_bytes - before[a][op].payload_bytes,
                        after[op].wire_bytes - before[a][op].wire_bytes};
    };
    const int64_t L = c.model.n_layer, HS = c.model.head_dim(), N = int64_t{c.batch_size} * c.seq_len / 4;
    const int64_t QD = c.model.n_head * HS, KD = c.model.kv_heads() * HS;
    const int64_t a2a_calls = L * (4 + 8), a2a_payload = L * N * ((2 * QD + 2 * KD) + (4 * QD + 4 * KD)) * 4;
    const std::string what = llama ? "llama" : "gpt2";
    EXPECT_EQ(delta(1, CommOp::all_to_all), std::tuple(a2a_calls, a2a_payload, a2a_payload / 2)) << what;
    const int64_t sends = L * ((2 - 1) + (2 - 1) + 2), block = 2 * N * KD * 4;
    EXPECT_EQ(delta(2, CommOp::send), std::tuple(sends, sends * block, sends * block)) << what;
    for (CommOp op : {CommOp::send, CommOp::all_to_all, CommOp::all_reduce, CommOp::all_gather}) {
      EXPECT_EQ(std::get<0>(delta(0, op)), 0) << what << ": " << comm_op_name(op) << " on cp";
    }
    EXPECT_EQ(std::get<0>(delta(1, CommOp::send)), 0) << what << ": sends on cp_ulysses";
    EXPECT_EQ(std::get<0>(delta(2, CommOp::all_to_all)), 0) << what << ": all-to-alls on cp_ring";
  }
}

// cp rank r is Ulysses rank r % 2 of ring position r / 2: position p holds the zigzag
// ring's chunks p and 3 - p (of 4), its first rank the first, its second the second.
// Catches: groups of non-consecutive cp ranks, runs cut for a ring of cp positions.
TEST(UspLayout, RingPositionsSplitContiguouslyOverTheirGroup) {
  Communicator& world = testing::world();
  if (world.size() != 4) GTEST_SKIP() << "USP 2 x 2 needs 4 ranks";
  MeshShape shape;
  shape.cp = 4, shape.cp_ulysses = 2;
  DeviceMesh mesh(world, shape);
  const int r = mesh.coord(Axis::cp);
  EXPECT_EQ(mesh.coord(Axis::cp_ulysses), r % 2);
  EXPECT_EQ(mesh.coord(Axis::cp_ring), r / 2);
  EXPECT_EQ(mesh.axis(Axis::cp_ulysses).rank(), r % 2);
  EXPECT_EQ(mesh.axis(Axis::cp_ring).rank(), r / 2);
  const CpLayout layout{4, CpMode::usp, CpChunks::zigzag, 2};
  const std::vector<TokenRun> runs = layout.runs(r, 80);  // ring chunks of 20 tokens
  ASSERT_EQ(runs.size(), 1u);
  const int p = r / 2, chunk = r % 2 == 0 ? p : 3 - p;
  EXPECT_EQ(runs[0].begin, 0);
  EXPECT_EQ(runs[0].count, 20);
  EXPECT_EQ(runs[0].position, chunk * 20);
  // The group's rows gathered in order are the ring's rows of position p.
  std::vector<int32_t> group = CpLayout{4, CpMode::usp, CpChunks::zigzag, 2}.positions(2 * p, 80);
  const std::vector<int32_t> second = layout.positions(2 * p + 1, 80);
  group.insert(group.end(), second.begin(), second.end());
  EXPECT_EQ(group, layout.ring().positions(p, 80));
}

}  // namespace
}  // namespace ndt
