// The step-time model's communication: how long a rank's calls of one collective on one
// mesh axis take (alpha-beta: calls x (hops x latency + per-call cost) + wire bytes /
// bandwidth), on the link the axis's groups use. A group inside a node uses the node's
// fabric; a group that crosses nodes shares each node's inter-node links with the other
// groups crossing at the same time; DDP's all-reduce across nodes takes the two-level
// route where the run would (parallel.dp_reduction, parallel/data/two_level_reduce.h).
// docs/planner.md "Step time".
#pragma once

#include "plan/comm_model.h"
#include "plan/device_profile.h"
#include "train/config.h"

#include <cstdint>
#include <optional>

namespace ndt {

// The world ranks one group of `axis` spans: the mesh is row-major in (pp, dp_replicate,
// dp_shard, cp, tp), tp innermost (core/axis.h), and consecutive world ranks share a node.
int64_t axis_extent(Axis axis, const MeshShape& m);

// How the groups of `axis` sit on the nodes.
struct AxisPlacement {
  bool crosses_nodes = false;
  int ranks_per_node = 1;    // one group's ranks on one node (the group's size when inside)
  int streams_per_node = 1;  // crossing: transfers leaving a node at once, one per group on it
};
AxisPlacement axis_placement(Axis axis, const MeshShape& m, const Cluster& cluster);

// What one rank of a group of `axis` sends over: the node's fabric, or its share of the
// node's inter-node links (Cluster::device.inter_node_links) among the streams leaving
// the node at once (a ring over a group sends one stream out of each node it spans).
LinkProfile axis_link(Axis axis, const MeshShape& m, const Cluster& cluster);

// Seconds of a rank's calls of `op` over `group` ranks on `link` (each call also pays the
// link's call_s, a calibrated device's per-call cost). An all-reduce takes the
// better of the ring (the wire bytes the counters count) and a tree (2 log2 n hops, twice
// the payload on the wire), as NCCL chooses between them.
double op_seconds(CommOp op, const OpVolume& v, int group, const LinkProfile& link);

// One call's seconds of `op` at `wire_bytes` per rank from the device's table for its
// kind (DeviceProfile::collective_calls; all_to_all_v by all_to_all's): interpolated in
// log size and log time, the first point's time below the table and the last point's
// bandwidth past it. nullopt where the device times no such kind.
std::optional<double> measured_call_seconds(const DeviceProfile& device, CommOp op, double wire_bytes);

// Seconds of a rank's calls of `op` over `group` ranks: from the device's table where it
// times the kind and the group is the one it was timed on (devices_per_node ranks, inside
// one node), else op_seconds on `link`.
double group_op_seconds(CommOp op, const OpVolume& v, int group, bool inside_node, const LinkProfile& link,
                        const DeviceProfile& device);

// group_op_seconds for the groups of `axis`.
double axis_op_seconds(CommOp op, const OpVolume& v, Axis axis, const MeshShape& m, const Cluster& cluster);

// Seconds of the all-reduces `v` on `axis` as the run routes them: DDP's gradient
// all-reduce over nodes (config.zero_stage 0, fp32 reduction) runs in two levels under
// dp_reduction = hierarchical, the faster of the two routes under auto (the run times
// both and keeps the faster), flat otherwise; every other all-reduce flat.
double all_reduce_seconds(const RunConfig& config, Axis axis, const OpVolume& v, const MeshShape& m,
                          const Cluster& cluster);

}  // namespace ndt
