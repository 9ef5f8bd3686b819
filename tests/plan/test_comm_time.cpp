// The step-time model's links (plan/comm_time.h) against the arithmetic of the routes
// they model: a group inside a node on the node's fabric; groups crossing nodes sharing a
// node's links (one stream per group leaving the node); DDP's two-level all-reduce where
// parallel.dp_reduction and the layout take it, the flat ring elsewhere.
#include "plan/comm_time.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ndt {
namespace {

// Two nodes of two devices; between nodes one 1 GB/s link per node and no latency, inside
// a node a fabric so fast that only the network counts.
Cluster two_hosts(int links) {
  DeviceProfile d = builtin_device("h100-sxm");
  d.intra_node = {1e15, 0};
  d.inter_node = {1e9, 0};
  d.inter_node_links = links;
  return make_cluster(d, 2, 2, 0);
}

MeshShape mesh(int dp, int tp) {
  MeshShape m;
  m.dp_replicate = dp, m.tp = tp;
  return m;
}

// A rank's ring all-reduce of `bytes` over n ranks, as the counters count it.
OpVolume ring_all_reduce(int64_t bytes, int n) { return {1, bytes, 2 * (n - 1) * bytes / n}; }

TEST(CommTime, GroupsSitOnTheNodesAsTheMeshOrdersRanks) {
  const Cluster c = two_hosts(1);
  const AxisPlacement inside = axis_placement(Axis::tp, mesh(2, 2), c);
  EXPECT_FALSE(inside.crosses_nodes);
  EXPECT_EQ(inside.ranks_per_node, 2);
  // dp over all four ranks: consecutive, two of the group on each node, one ring leaving a node.
  const AxisPlacement contiguous = axis_placement(Axis::dp, mesh(4, 1), c);
  EXPECT_TRUE(contiguous.crosses_nodes);
  EXPECT_EQ(contiguous.ranks_per_node, 2);
  EXPECT_EQ(contiguous.streams_per_node, 1);
  // dp beside tp = 2: each node holds one rank of each of the two dp groups, both crossing.
  const AxisPlacement strided = axis_placement(Axis::dp, mesh(2, 2), c);
  EXPECT_TRUE(strided.crosses_nodes);
  EXPECT_EQ(strided.ranks_per_node, 1);
  EXPECT_EQ(strided.streams_per_node, 2);
}

// Catches: a node's one link counted once per rank (every group at full speed).
TEST(CommTime, GroupsCrossingAtOnceShareANodesLinks) {
  EXPECT_DOUBLE_EQ(axis_link(Axis::dp, mesh(4, 1), two_hosts(1)).bytes_per_s, 1e9);
  EXPECT_DOUBLE_EQ(axis_link(Axis::dp, mesh(2, 2), two_hosts(1)).bytes_per_s, 0.5e9);
  EXPECT_DOUBLE_EQ(axis_link(Axis::dp, mesh(2, 2), two_hosts(2)).bytes_per_s, 1e9);
  EXPECT_DOUBLE_EQ(axis_link(Axis::dp, mesh(2, 2), two_hosts(0)).bytes_per_s, 1e9);  // a link per device
  EXPECT_DOUBLE_EQ(axis_link(Axis::tp, mesh(2, 2), two_hosts(1)).bytes_per_s, 1e15);
}

// DDP on 2 nodes x 2 ranks, 1 GB/s per node: the flat ring sends 1.5 buckets out of each
// node from one rank; the two levels send half a bucket from each of the two ranks,
// sharing the link: 1 bucket's time.
TEST(CommTime, DdpAcrossNodesTakesTheTwoLevelRouteWhereTheRunWould) {
  const Cluster c = two_hosts(1);
  const MeshShape m = mesh(4, 1);
  const int64_t bucket = int64_t{1} << 30;
  const OpVolume v = ring_all_reduce(bucket, 4);
  const double flat_s = 1.5 * static_cast<double>(bucket) / 1e9, two_level_s = static_cast<double>(bucket) / 1e9;
  RunConfig config;
  config.dp_reduction = DpReduction::flat;
  EXPECT_NEAR(all_reduce_seconds(config, Axis::dp, v, m, c), flat_s, 1e-9 * flat_s);
  config.dp_reduction = DpReduction::hierarchical;
  EXPECT_NEAR(all_reduce_seconds(config, Axis::dp, v, m, c), two_level_s, 1e-6 * two_level_s);
  config.dp_reduction = DpReduction::automatic;  // the run keeps the faster
  EXPECT_NEAR(all_reduce_seconds(config, Axis::dp, v, m, c), two_level_s, 1e-6 * two_level_s);
  // Where the run reduces flat whatever the setting: bf16 sums, ZeRO, a group inside a node.
  config.reduce_dtype = DType::bf16;
  EXPECT_NEAR(all_reduce_seconds(config, Axis::dp, v, m, c), flat_s, 1e-9 * flat_s);
  config.reduce_dtype = DType::f32, config.zero_stage = 1;
  EXPECT_NEAR(all_reduce_seconds(config, Axis::dp, v, m, c), flat_s, 1e-9 * flat_s);
  config.zero_stage = 0;
  const Cluster one_node = make_cluster(c.device, 1, 4, 0);
  EXPECT_NEAR(all_reduce_seconds(config, Axis::dp, v, m, one_node), 1.5 * static_cast<double>(bucket) / 1e15, 1e-12);
}

// Catches: a calibrated device's per-kind table not read (the alpha-beta used), read for
// a kind it does not time or for a group of another size than it was timed on, looked up
// linearly instead of in log size and time, or extrapolated past its ends other than by
// the first point's time and the last point's bandwidth.
TEST(CommTime, ACollectiveOfATimedKindIsPricedFromItsTable) {
  DeviceProfile d = builtin_device("h100-sxm");
  d.intra_node = {1e9, 0, 1e-6};
  d.devices_per_node = 2;
  d.collective_calls[static_cast<size_t>(TimedCollective::reduce_scatter)] = {{1000, 1e-4}, {100000, 1e-2}};
  d.collective_calls[static_cast<size_t>(TimedCollective::all_to_all)] = {{1000, 2e-5}, {100000, 4e-5}};
  EXPECT_DOUBLE_EQ(*measured_call_seconds(d, CommOp::reduce_scatter, 1000), 1e-4);
  EXPECT_DOUBLE_EQ(*measured_call_seconds(d, CommOp::reduce_scatter, 10), 1e-4);             // the first point below
  EXPECT_NEAR(*measured_call_seconds(d, CommOp::reduce_scatter, 200000), 2e-2, 1e-15);      // its bandwidth above
  EXPECT_NEAR(*measured_call_seconds(d, CommOp::reduce_scatter, 10000), 1e-3, 1e-15);       // halfway in log-log
  EXPECT_NEAR(*measured_call_seconds(d, CommOp::all_to_all_v, 10000), std::sqrt(8e-10), 1e-15);  // all_to_all's table
  EXPECT_FALSE(measured_call_seconds(d, CommOp::all_gather, 1000).has_value());
  EXPECT_FALSE(measured_call_seconds(d, CommOp::send, 1000).has_value());

  const Cluster node = make_cluster(d, 1, 2, 0);
  MeshShape m = mesh(1, 2);
  const OpVolume four_calls{4, 40000, 40000};  // 10000 wire bytes a call
  EXPECT_NEAR(axis_op_seconds(CommOp::reduce_scatter, four_calls, Axis::tp, m, node), 4e-3, 1e-15);
  // A kind without a table, a group of another size, or a group across nodes: the alpha-beta.
  const double alpha_beta = op_seconds(CommOp::all_gather, four_calls, 2, d.intra_node);
  EXPECT_DOUBLE_EQ(axis_op_seconds(CommOp::all_gather, four_calls, Axis::tp, m, node), alpha_beta);
  DeviceProfile timed_on_four = d;
  timed_on_four.devices_per_node = 4;
  const Cluster four = make_cluster(timed_on_four, 1, 4, 0);
  EXPECT_DOUBLE_EQ(axis_op_seconds(CommOp::reduce_scatter, four_calls, Axis::tp, m, four),
                   op_seconds(CommOp::reduce_scatter, four_calls, 2, d.intra_node));
  EXPECT_DOUBLE_EQ(group_op_seconds(CommOp::reduce_scatter, four_calls, 2, false, d.inter_node, d),
                   op_seconds(CommOp::reduce_scatter, four_calls, 2, d.inter_node));
}

}  // namespace
}  // namespace ndt
