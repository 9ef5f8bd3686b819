#include "plan/comm_time.h"

#include "plan/table_lookup.h"

#include <algorithm>
#include <cmath>

namespace ndt {

namespace {

// Latency hops of one call of `op` over n ranks (ring algorithms; tree for broadcast
// and barrier).
double hops(CommOp op, int n) {
  if (n <= 1) return 0;
  switch (op) {
    case CommOp::all_reduce: return 2.0 * (n - 1);
    case CommOp::reduce_scatter:
    case CommOp::all_gather:
    case CommOp::all_to_all:
    case CommOp::all_to_all_v: return n - 1;
    case CommOp::send:
    case CommOp::recv: return 1;
    default: return std::ceil(std::log2(n));
  }
}

// One stream's share of a node's inter-node links when `streams` leave the node at once
// (each stream at most one link's bandwidth).
LinkProfile shared_inter_node_link(const Cluster& cluster, int streams) {
  const DeviceProfile& d = cluster.device;
  const int links = d.inter_node_links > 0 ? d.inter_node_links : cluster.devices_per_node;
  LinkProfile link = d.inter_node;
  link.bytes_per_s *= std::min(1.0, static_cast<double>(links) / std::max(1, streams));
  return link;
}

// The ring over each node's ranks of the group: `wire` bytes per rank per call.
double intra_node_seconds(CommOp op, int64_t calls, double wire, int ranks, const LinkProfile& link) {
  return static_cast<double>(calls) * (hops(op, ranks) * link.latency_s + link.call_s) + wire / link.bytes_per_s;
}

}  // namespace

int64_t axis_extent(Axis axis, const MeshShape& m) {
  const int64_t tp = m.tp, cp = m.cp, sh = m.dp_shard, rep = m.dp_replicate;
  switch (axis) {
    case Axis::tp: return tp;
    case Axis::cp:
    case Axis::cp_ring: return tp * cp;
    case Axis::cp_ulysses: return tp * m.cp_ulysses;
    case Axis::ep: return tp * m.ep;
    case Axis::dp_shard:
    case Axis::dp_shard_cp:
    case Axis::edp_shard: return tp * cp * sh;
    case Axis::dp_replicate:
    case Axis::dp:
    case Axis::dp_cp:
    case Axis::edp: return tp * cp * sh * rep;
    case Axis::pp: return tp * cp * sh * rep * m.pp;
  }
  return 1;
}

AxisPlacement axis_placement(Axis axis, const MeshShape& m, const Cluster& cluster) {
  const int64_t extent = axis_extent(axis, m), group = m.size(axis), per_node = cluster.devices_per_node;
  AxisPlacement p;
  p.crosses_nodes = !(extent <= per_node && per_node % extent == 0);
  p.ranks_per_node = static_cast<int>(group);
  if (!p.crosses_nodes) return p;
  // Consecutive members of a group are `stride` world ranks apart: `stride` groups
  // interleave on a node, each with per_node / stride of its ranks there.
  const int64_t stride = std::max<int64_t>(1, extent / std::max<int64_t>(1, group));
  p.ranks_per_node = static_cast<int>(std::clamp<int64_t>(per_node / stride, 1, group));
  p.streams_per_node = static_cast<int>(std::min(stride, per_node));
  return p;
}

LinkProfile axis_link(Axis axis, const MeshShape& m, const Cluster& cluster) {
  const AxisPlacement p = axis_placement(axis, m, cluster);
  return p.crosses_nodes ? shared_inter_node_link(cluster, p.streams_per_node) : cluster.device.intra_node;
}

double op_seconds(CommOp op, const OpVolume& v, int group, const LinkProfile& link) {
  if (v.calls == 0) return 0;
  const double calls = static_cast<double>(v.calls);
  const double ring =
      calls * (hops(op, group) * link.latency_s + link.call_s) + static_cast<double>(v.wire_bytes) / link.bytes_per_s;
  if (op != CommOp::all_reduce || group <= 2) return ring;
  const double tree = calls * (2 * std::ceil(std::log2(group)) * link.latency_s + link.call_s) +
                      2.0 * static_cast<double>(v.payload_bytes) / link.bytes_per_s;
  return std::min(ring, tree);
}

std::optional<double> measured_call_seconds(const DeviceProfile& device, CommOp op, double wire_bytes) {
  std::optional<TimedCollective> kind;
  switch (op) {
    case CommOp::all_reduce: kind = TimedCollective::all_reduce; break;
    case CommOp::reduce_scatter: kind = TimedCollective::reduce_scatter; break;
    case CommOp::all_gather: kind = TimedCollective::all_gather; break;
    case CommOp::all_to_all:
    case CommOp::all_to_all_v: kind = TimedCollective::all_to_all; break;
    default: break;
  }
  if (!kind) return std::nullopt;
  const std::vector<CollectiveCallPoint>& table = device.collective_calls[static_cast<size_t>(*kind)];
  if (table.empty()) return std::nullopt;
  // Past the table, at its last point's bandwidth: a larger call's time grows with its bytes.
  if (wire_bytes > table.back().wire_bytes) return table.back().seconds * wire_bytes / table.back().wire_bytes;
  return interpolate_in_log(table, wire_bytes, &CollectiveCallPoint::wire_bytes, &CollectiveCallPoint::seconds,
                            ValueScale::log);
}

double group_op_seconds(CommOp op, const OpVolume& v, int group, bool inside_node, const LinkProfile& link,
                        const DeviceProfile& device) {
  if (v.calls == 0) return 0;
  if (inside_node && group == device.devices_per_node) {
    const double calls = static_cast<double>(v.calls);
    if (const std::optional<double> call_s = measured_call_seconds(device, op, static_cast<double>(v.wire_bytes) / calls)) {
      return calls * *call_s;
    }
  }
  return op_seconds(op, v, group, link);
}

double axis_op_seconds(CommOp op, const OpVolume& v, Axis axis, const MeshShape& m, const Cluster& cluster) {
  return group_op_seconds(op, v, m.size(axis), !axis_placement(axis, m, cluster).crosses_nodes,
                          axis_link(axis, m, cluster), cluster.device);
}

double all_reduce_seconds(const RunConfig& config, Axis axis, const OpVolume& v, const MeshShape& m,
                          const Cluster& cluster) {
  const int group = m.size(axis);
  const double flat = axis_op_seconds(CommOp::all_reduce, v, axis, m, cluster);
  const Axis ddp_axis = m.cp > 1 ? Axis::dp_cp : Axis::dp;
  const AxisPlacement p = axis_placement(axis, m, cluster);
  const int r = p.ranks_per_node;
  if (axis != ddp_axis || config.zero_stage != 0 || config.reduce_dtype != DType::f32 ||
      config.dp_reduction == DpReduction::flat || !p.crosses_nodes || r <= 1 || group % r != 0 || v.calls == 0) {
    return flat;
  }
  // A reduce-scatter among the group's r ranks on each node, an all-reduce of each 1/r
  // shard between the n nodes (every rank of every crossing group sends at once), an
  // all-gather inside the node.
  const int n = group / r;
  const double payload = static_cast<double>(v.payload_bytes);
  const double inside_wire = payload * (r - 1) / r;
  const double inside = 2 * intra_node_seconds(CommOp::all_gather, v.calls, inside_wire, r, cluster.device.intra_node);
  OpVolume across{v.calls, v.payload_bytes / r, static_cast<int64_t>(2.0 * (n - 1) / n * payload / r)};
  const double two_level =
      inside + op_seconds(CommOp::all_reduce, across, n, shared_inter_node_link(cluster, r * p.streams_per_node));
  return config.dp_reduction == DpReduction::hierarchical ? two_level : std::min(flat, two_level);
}

}  // namespace ndt
