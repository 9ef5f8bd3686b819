// Data parallelism across nodes (docs/multinode.md): the ranks learn their nodes, the
// flat ring sends across nodes from the ranks whose next rank is on another node, and
// the hierarchical reduction (parallel/data/two_level_reduce.h) moves only each rank's
// shard across, with the same sum. The byte counters split wire bytes into those that
// cross nodes; these tests hold both splits to theory. They need ranks on at least two
// nodes, as scripts/hosts.sh emulates (tests/hosts runs them that way), and are skipped
// on one node.
#include "comm/device_mesh.h"
#include "mpi_env.h"
#include "parallel/data/two_level_reduce.h"

#include <gtest/gtest.h>

#include <vector>

namespace ndt {
namespace {

constexpr size_t kFloats = 1000;  // per rank; a multiple of no rank count in particular

// The mesh of every rank replicated over dp (DDP), and its topology.
struct Ddp {
  Ddp() : mesh(testing::world(), MeshShape{1, testing::world().size(), 1, 1, 1}) {}
  DeviceMesh mesh;
  Communicator& dp() { return mesh.axis(Axis::dp); }
  int nodes() const { return mesh.topology().nodes(); }
};

std::vector<float> values_of(int rank) {
  std::vector<float> v(kFloats);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((rank + 1) * 1000 + static_cast<int>(i % 97));
  return v;
}

// The exact sum over n ranks of values_of(r)[i] (small integers: exact in f32).
float sum_at(size_t i, int n) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += static_cast<float>((r + 1) * 1000 + static_cast<int>(i % 97));
  return s;
}

// Catches: a flat ring counted as crossing nodes from every rank (or from none).
TEST(AcrossNodes, TheFlatRingCrossesFromTheRanksWhoseNextRankIsElsewhere) {
  Ddp ddp;
  if (ddp.nodes() < 2) GTEST_SKIP() << "needs ranks on two nodes (scripts/hosts.sh; tests/hosts)";
  Communicator& dp = ddp.dp();
  std::vector<float> x = values_of(dp.rank());
  dp.stats() = {};
  dp.all_reduce(x.data(), x.size(), DType::f32, ReduceOp::sum);
  const int n = dp.size();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], sum_at(i, n)) << i;
  const int64_t wire = 2 * (n - 1) * static_cast<int64_t>(kFloats * 4) / n;
  const std::vector<int>& node = ddp.mesh.topology().node_of_rank;
  const bool next_elsewhere = node[static_cast<size_t>((dp.rank() + 1) % n)] != node[static_cast<size_t>(dp.rank())];
  EXPECT_EQ(dp.stats()[CommOp::all_reduce].wire_bytes, wire);
  EXPECT_EQ(dp.stats()[CommOp::all_reduce].inter_node_wire_bytes, next_elsewhere ? wire : 0);
}

// Catches: a hierarchical sum that differs from the flat one, shards sent whole across
// nodes, or the second level's bytes not counted as crossing.
TEST(AcrossNodes, TheHierarchicalReductionSendsOnlyEachShardAcross) {
  Ddp ddp;
  if (ddp.nodes() < 2) GTEST_SKIP() << "needs ranks on two nodes (scripts/hosts.sh; tests/hosts)";
  ASSERT_TRUE(ddp.mesh.topology().uniform());
  Communicator& dp = ddp.dp();
  TwoLevelAllReduce levels(dp);
  const int n = dp.size(), k = levels.inside().size(), nodes = levels.across().size();
  EXPECT_EQ(k * nodes, n);
  EXPECT_EQ(nodes, ddp.nodes());
  std::vector<float> x = values_of(dp.rank());
  dp.stats() = {};
  levels.start(x.data(), x.size())->wait();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], sum_at(i, n)) << i;
  const int64_t shard = static_cast<int64_t>((kFloats + k - 1) / k) * 4, padded = shard * k;
  const CommStats& s = dp.stats();
  EXPECT_EQ(s[CommOp::reduce_scatter].wire_bytes, (k - 1) * padded / k);
  EXPECT_EQ(s[CommOp::reduce_scatter].inter_node_wire_bytes, 0);
  EXPECT_EQ(s[CommOp::all_reduce].wire_bytes, 2 * (nodes - 1) * shard / nodes);
  EXPECT_EQ(s[CommOp::all_reduce].inter_node_wire_bytes, 2 * (nodes - 1) * shard / nodes);
  EXPECT_EQ(s[CommOp::all_gather].wire_bytes, (k - 1) * padded / k);
  EXPECT_EQ(s[CommOp::all_gather].inter_node_wire_bytes, 0);
}

}  // namespace
}  // namespace ndt
