// DeviceMesh: the world's ranks arranged on named axes in the fixed order
// pp, dp_replicate, dp_shard, cp, tp (tp innermost, so tensor-parallel peers are
// neighbouring ranks, on one node). One communicator per axis, plus the flattenings
// dp (dp_replicate x dp_shard: data parallelism splits the batch over it), dp_shard_cp
// and dp_cp (with the context-parallel ranks: parameters are sharded and gradients
// reduced over them), and the expert-parallel groups ep, edp and edp_shard, whose
// ranks ep borrows from dp_shard_cp (core/axis.h). One rank is a mesh too: every axis
// of size one (DeviceMesh()).
#pragma once

#include "comm/communicator.h"
#include "comm/node_topology.h"
#include "core/axis.h"

#include <array>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ndt {

struct MeshShape {
  int pp = 1;
  int dp_replicate = 1;
  int dp_shard = 1;
  int cp = 1;
  int tp = 1;
  // Expert parallelism: not a factor of the world size (product() leaves it out); its
  // ranks are borrowed from dp_shard x cp, which it must divide.
  int ep = 1;
  // USP: the cp ranks of each Ulysses group (consecutive cp ranks), which must divide cp;
  // the rest, cp / cp_ulysses, is the ring (cp_ring). 1 without USP.
  int cp_ulysses = 1;

  // Also the flattenings dp, dp_shard_cp, dp_cp, the expert groups ep, edp, edp_shard and
  // USP's cp_ulysses and cp_ring (core/axis.h).
  int size(Axis axis) const;
  int64_t product() const { return int64_t{pp} * dp_replicate * dp_shard * cp * tp; }
  // "pp=1 x dp_replicate=2 x dp_shard=1 x cp=1 x tp=1", with " (ep=2)" appended when ep > 1
  // and " (cp_ulysses=2)" when cp_ulysses > 1.
  std::string str() const;
  // Throws unless every size is positive, the product equals world_size, ep divides
  // dp_shard x cp and cp_ulysses divides cp, naming the sizes.
  void validate(int world_size) const;
};

class DeviceMesh {
 public:
  // Collective over `world`: every rank builds the same mesh. World rank r sits at
  // the row-major coordinates of r in (pp, dp_replicate, dp_shard, cp, tp). The node
  // topology is learned here (comm/node_topology.h) unless given.
  DeviceMesh(Communicator& world, const MeshShape& shape);
  DeviceMesh(Communicator& world, const MeshShape& shape, NodeTopology topology);
  // One rank alone: every axis of size one over a SelfCommunicator the mesh owns
  // (comm/self_communicator.h), so a single-process run has a mesh like any other.
  DeviceMesh();

  const MeshShape& shape() const { return shape_; }
  Communicator& world() { return world_; }
  // The communicator along an axis, flattening or expert group (without cp, dp_shard_cp
  // is dp_shard's communicator and dp_cp is dp's; with ep = 1, edp is dp_cp's and
  // edp_shard is dp_shard_cp's: the same objects, the same counters; ep is then each
  // rank alone; with cp_ulysses = 1, cp_ring is cp's and cp_ulysses each rank alone).
  Communicator& axis(Axis axis) { return *axes_[static_cast<size_t>(axis)]; }
  // This rank's coordinate along an axis (a flattening: row-major over its axes, e.g. dp:
  // dp_replicate_coord * dp_shard + dp_shard_coord; ep: dp_shard_cp's % ep; edp: its rank
  // among the dp_cp ranks of its ep coordinate, dp_replicate_coord * (dp_shard_cp / ep) +
  // dp_shard_cp's / ep; edp_shard: dp_shard_cp's / ep; cp_ulysses: cp's % cp_ulysses;
  // cp_ring: cp's / cp_ulysses).
  int coord(Axis axis) const;
  int size(Axis axis) const { return shape_.size(axis); }

  // Which ranks share a node, and, per axis, the most nodes any of its groups spans (1:
  // every group stays inside a node).
  const NodeTopology& topology() const { return topology_; }
  int nodes_spanned(Axis axis) const { return nodes_spanned_[static_cast<size_t>(axis)]; }
  // One group of the axis that crosses nodes, by its world ranks and hosts ("ranks 1, 2
  // on host-a, host-b"); empty when none does.
  const std::string& crossing_group(Axis axis) const { return crossing_group_[static_cast<size_t>(axis)]; }

 private:
  DeviceMesh(std::unique_ptr<Communicator> world, const MeshShape& shape);
  void build_axes();
  // The mesh coordinates of a world rank, and the group of `axis` holding a rank at
  // these coordinates (the communicator's split color).
  std::array<int, 5> coords_of(int rank) const;
  int group_of(Axis axis, const std::array<int, 5>& c) const;
  // nodes_spanned_, and each communicator's peers on other hosts (for its messages).
  void place_on_nodes();
  // "ranks 2, 3 on host-b; rank 4 on host-c": the peers a lost host or a cut link leaves unreachable.
  std::string peers_text(const std::map<int, std::vector<int>>& ranks_by_node) const;

  std::unique_ptr<Communicator> owned_world_;  // the single-rank mesh's; null otherwise
  Communicator& world_;
  MeshShape shape_;
  NodeTopology topology_;
  std::array<int, kNumAxes> nodes_spanned_{};
  std::array<std::string, kNumAxes> crossing_group_;
  std::array<int, 5> coords_{};
  std::array<std::shared_ptr<Communicator>, kNumAxes> axes_;  // indexed by Axis
};

}  // namespace ndt
