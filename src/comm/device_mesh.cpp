#include "comm/device_mesh.h"

#include "comm/self_communicator.h"
#include "core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

namespace ndt {

namespace {

std::array<int, 5> sizes_of(const MeshShape& s) { return {s.pp, s.dp_replicate, s.dp_shard, s.cp, s.tp}; }

}  // namespace

int MeshShape::size(Axis axis) const {
  if (axis == Axis::dp) return dp_replicate * dp_shard;
  if (axis == Axis::dp_shard_cp) return dp_shard * cp;
  if (axis == Axis::dp_cp) return dp_replicate * dp_shard * cp;
  if (axis == Axis::ep) return ep;
  if (axis == Axis::edp) return dp_replicate * dp_shard * cp / ep;
  if (axis == Axis::edp_shard) return dp_shard * cp / ep;
  if (axis == Axis::cp_ulysses) return cp_ulysses;
  if (axis == Axis::cp_ring) return cp / cp_ulysses;
  return sizes_of(*this)[static_cast<size_t>(axis)];
}

std::string MeshShape::str() const {
  const auto sizes = sizes_of(*this);
  std::string s;
  for (size_t i = 0; i < sizes.size(); ++i) s += fmt::format("{}{}={}", i ? " x " : "", axis_name(kMeshAxes[i]), sizes[i]);
  if (ep > 1) s += fmt::format(" (ep={})", ep);
  if (cp_ulysses > 1) s += fmt::format(" (cp_ulysses={})", cp_ulysses);
  return s;
}

void MeshShape::validate(int world_size) const {
  const auto sizes = sizes_of(*this);
  for (size_t i = 0; i < sizes.size(); ++i) {
    NDT_CHECK(sizes[i] >= 1, "parallel.{} = {} must be at least 1", axis_name(kMeshAxes[i]), sizes[i]);
  }
  NDT_CHECK(product() == world_size, "the mesh {} has {} ranks but the job has {} (world size)", str(),
            product(), world_size);
  NDT_CHECK(ep >= 1, "parallel.ep = {} must be at least 1", ep);
  NDT_CHECK(dp_shard * cp % ep == 0,
            "parallel.ep = {} must divide the data-parallel ranks it borrows, parallel.dp_shard x cp = {} x {} = {}", ep,
            dp_shard, cp, dp_shard * cp);
  NDT_CHECK(cp_ulysses >= 1 && cp % cp_ulysses == 0,
            "parallel.cp_ulysses = {} must be at least 1 and divide parallel.cp = {} (USP: cp = cp_ulysses x the ring)",
            cp_ulysses, cp);
}

DeviceMesh::DeviceMesh(Communicator& world, const MeshShape& shape)
    : DeviceMesh(world, shape, detect_node_topology(world)) {}

DeviceMesh::DeviceMesh(Communicator& world, const MeshShape& shape, NodeTopology topology)
    : world_(world), shape_(shape), topology_(std::move(topology)) {
  build_axes();
}

DeviceMesh::DeviceMesh() : DeviceMesh(std::make_unique<SelfCommunicator>(), MeshShape{}) {}

DeviceMesh::DeviceMesh(std::unique_ptr<Communicator> world, const MeshShape& shape)
    : owned_world_(std::move(world)),
      world_(*owned_world_),
      shape_(shape),
      topology_(NodeTopology::single_node(1, local_host_name())) {
  build_axes();
}

std::array<int, 5> DeviceMesh::coords_of(int rank) const {
  const auto sizes = sizes_of(shape_);
  std::array<int, 5> c{};
  for (int i = 4; i >= 0; --i) {
    c[static_cast<size_t>(i)] = rank % sizes[static_cast<size_t>(i)];
    rank /= sizes[static_cast<size_t>(i)];
  }
  return c;
}

int DeviceMesh::group_of(Axis axis, const std::array<int, 5>& c) const {
  const auto sizes = sizes_of(shape_);
  // Ranks that agree on every coordinate except the dropped ones share a group.
  auto without = [&](std::initializer_list<int> dropped) {
    int color = 0;
    for (int i = 0; i < 5; ++i) {
      const bool drop = std::find(dropped.begin(), dropped.end(), i) != dropped.end();
      color = color * sizes[static_cast<size_t>(i)] + (drop ? 0 : c[static_cast<size_t>(i)]);
    }
    return color;
  };
  const int dsc = c[2] * shape_.cp + c[3];  // the dp_shard_cp coordinate, which ep borrows from
  switch (axis) {
    case Axis::pp: return without({0});
    case Axis::dp_replicate: return without({1});
    case Axis::dp_shard: return without({2});
    case Axis::cp: return without({3});
    case Axis::tp: return without({4});
    case Axis::dp: return without({1, 2});
    case Axis::dp_shard_cp: return without({2, 3});
    case Axis::dp_cp: return without({1, 2, 3});
    case Axis::ep: return ((c[0] * shape_.dp_replicate + c[1]) * (shape_.size(Axis::dp_shard_cp) / shape_.ep) +
                           dsc / shape_.ep) * shape_.tp + c[4];
    case Axis::edp: return (c[0] * shape_.ep + dsc % shape_.ep) * shape_.tp + c[4];
    case Axis::edp_shard: return ((c[0] * shape_.dp_replicate + c[1]) * shape_.ep + dsc % shape_.ep) * shape_.tp + c[4];
    // USP: the cp group cut into Ulysses groups of consecutive cp ranks, and across them the rings.
    case Axis::cp_ulysses: return without({3}) * (shape_.cp / shape_.cp_ulysses) + c[3] / shape_.cp_ulysses;
    case Axis::cp_ring: return without({3}) * shape_.cp_ulysses + c[3] % shape_.cp_ulysses;
  }
  return 0;
}

void DeviceMesh::build_axes() {
  Communicator& world = world_;
  shape_.validate(world.size());
  NDT_CHECK(static_cast<int>(topology_.node_of_rank.size()) == world.size(),
            "the node topology describes {} ranks but the world has {}", topology_.node_of_rank.size(), world.size());
  coords_ = coords_of(world.rank());
  auto split = [&](Axis axis) {
    axes_[static_cast<size_t>(axis)] = world.split(group_of(axis, coords_), coord(axis), std::string(axis_name(axis)));
  };
  auto alias = [&](Axis axis, Axis of) { axes_[static_cast<size_t>(axis)] = axes_[static_cast<size_t>(of)]; };
  for (Axis axis : {Axis::pp, Axis::dp_replicate, Axis::dp_shard, Axis::cp, Axis::tp, Axis::dp}) split(axis);
  // Without cp, dp_shard_cp and dp_cp are dp_shard and dp; with ep = 1, edp and edp_shard
  // are dp_cp and dp_shard_cp; without USP, cp_ring is cp: the same objects, the same counters.
  if (shape_.cp == 1) {
    alias(Axis::dp_shard_cp, Axis::dp_shard), alias(Axis::dp_cp, Axis::dp);
  } else {
    split(Axis::dp_shard_cp), split(Axis::dp_cp);
  }
  split(Axis::ep);
  if (shape_.ep == 1) {
    alias(Axis::edp, Axis::dp_cp), alias(Axis::edp_shard, Axis::dp_shard_cp);
  } else {
    split(Axis::edp), split(Axis::edp_shard);
  }
  split(Axis::cp_ulysses);
  if (shape_.cp_ulysses == 1) {
    alias(Axis::cp_ring, Axis::cp);
  } else {
    split(Axis::cp_ring);
  }
  place_on_nodes();
}

void DeviceMesh::place_on_nodes() {
  const std::vector<int>& node = topology_.node_of_rank;
  const int me = world_.rank();
  for (size_t a = 0; a < kNumAxes; ++a) {
    const Axis axis = static_cast<Axis>(a);
    std::map<int, std::set<int>> nodes_of_group;
    std::map<int, std::vector<int>> ranks_of_group;
    std::map<int, std::vector<int>> others;  // this rank's group's ranks on other nodes, by node
    const int mine = group_of(axis, coords_);
    for (int r = 0; r < world_.size(); ++r) {
      const int g = group_of(axis, coords_of(r));
      nodes_of_group[g].insert(node[static_cast<size_t>(r)]);
      ranks_of_group[g].push_back(r);
      if (g == mine && node[static_cast<size_t>(r)] != node[static_cast<size_t>(me)]) {
        others[node[static_cast<size_t>(r)]].push_back(r);
      }
    }
    int most = 1;
    for (const auto& [g, nodes] : nodes_of_group) {
      most = std::max(most, static_cast<int>(nodes.size()));
      if (nodes.size() > 1 && crossing_group_[a].empty()) {
        std::vector<std::string> hosts;
        for (int n : nodes) hosts.push_back(topology_.host_names[static_cast<size_t>(n)]);
        crossing_group_[a] = fmt::format("ranks {} on {}", fmt::join(ranks_of_group[g], ", "), fmt::join(hosts, ", "));
      }
    }
    nodes_spanned_[a] = most;
    axes_[a]->set_peers_on_other_hosts(peers_text(others));
    std::vector<int> member_nodes;
    for (int r : ranks_of_group[mine]) member_nodes.push_back(node[static_cast<size_t>(r)]);
    axes_[a]->set_member_nodes(std::move(member_nodes));
  }
  // The world's collectives (the loss, the non-finite agreement) wait on every other host.
  std::map<int, std::vector<int>> elsewhere;
  for (int r = 0; r < world_.size(); ++r) {
    if (node[static_cast<size_t>(r)] != node[static_cast<size_t>(me)]) elsewhere[node[static_cast<size_t>(r)]].push_back(r);
  }
  world_.set_peers_on_other_hosts(peers_text(elsewhere));
  world_.set_member_nodes(node);
}

std::string DeviceMesh::peers_text(const std::map<int, std::vector<int>>& ranks_by_node) const {
  std::string peers;
  for (const auto& [n, ranks] : ranks_by_node) {
    peers += fmt::format("{}rank{} {} on {}", peers.empty() ? "" : "; ", ranks.size() == 1 ? "" : "s",
                         fmt::join(ranks, ", "), topology_.host_names[static_cast<size_t>(n)]);
  }
  return peers;
}

int DeviceMesh::coord(Axis axis) const {
  if (axis == Axis::dp) return coords_[1] * shape_.dp_shard + coords_[2];
  if (axis == Axis::dp_shard_cp) return coords_[2] * shape_.cp + coords_[3];
  if (axis == Axis::dp_cp) return coord(Axis::dp) * shape_.cp + coords_[3];
  if (axis == Axis::ep) return coord(Axis::dp_shard_cp) % shape_.ep;
  if (axis == Axis::edp_shard) return coord(Axis::dp_shard_cp) / shape_.ep;
  if (axis == Axis::cp_ulysses) return coords_[3] % shape_.cp_ulysses;
  if (axis == Axis::cp_ring) return coords_[3] / shape_.cp_ulysses;
  if (axis == Axis::edp) {
    return coords_[1] * (shape_.size(Axis::dp_shard_cp) / shape_.ep) + coord(Axis::dp_shard_cp) / shape_.ep;
  }
  return coords_[static_cast<size_t>(axis)];
}

}  // namespace ndt
