#include "comm/device_mesh.h"

#include "comm/self_communicator.h"
#include "core/error.h"

#include <fmt/format.h>

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
  return sizes_of(*this)[static_cast<size_t>(axis)];
}

std::string MeshShape::str() const {
  const auto sizes = sizes_of(*this);
  std::string s;
  for (size_t i = 0; i < sizes.size(); ++i) s += fmt::format("{}{}={}", i ? " x " : "", axis_name(kMeshAxes[i]), sizes[i]);
  if (ep > 1) s += fmt::format(" (ep={})", ep);
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
}

DeviceMesh::DeviceMesh(Communicator& world, const MeshShape& shape) : world_(world), shape_(shape) { build_axes(); }

DeviceMesh::DeviceMesh() : DeviceMesh(std::make_unique<SelfCommunicator>(), MeshShape{}) {}

DeviceMesh::DeviceMesh(std::unique_ptr<Communicator> world, const MeshShape& shape)
    : owned_world_(std::move(world)), world_(*owned_world_), shape_(shape) {
  build_axes();
}

void DeviceMesh::build_axes() {
  Communicator& world = world_;
  shape_.validate(world.size());
  const auto sizes = sizes_of(shape_);
  int rest = world.rank();
  for (int i = 4; i >= 0; --i) {
    coords_[i] = rest % sizes[i];
    rest /= sizes[i];
  }
  // Ranks that agree on every coordinate except the split ones share a communicator.
  auto color_without = [&](std::initializer_list<int> dropped) {
    int color = 0;
    for (int i = 0; i < 5; ++i) {
      bool drop = false;
      for (int d : dropped) drop |= d == i;
      color = color * sizes[i] + (drop ? 0 : coords_[i]);
    }
    return color;
  };
  for (int i = 0; i < 5; ++i) {
    axes_[i] = world.split(color_without({i}), coords_[i], std::string(axis_name(kMeshAxes[i])));
  }
  axes_[static_cast<size_t>(Axis::dp)] = world.split(color_without({1, 2}), coord(Axis::dp), "dp");
  if (shape_.cp == 1) {
    axes_[static_cast<size_t>(Axis::dp_shard_cp)] = axes_[static_cast<size_t>(Axis::dp_shard)];
    axes_[static_cast<size_t>(Axis::dp_cp)] = axes_[static_cast<size_t>(Axis::dp)];
  } else {
    axes_[static_cast<size_t>(Axis::dp_shard_cp)] =
        world.split(color_without({2, 3}), coord(Axis::dp_shard_cp), "dp_shard_cp");
    axes_[static_cast<size_t>(Axis::dp_cp)] = world.split(color_without({1, 2, 3}), coord(Axis::dp_cp), "dp_cp");
  }
  // ep: the ranks sharing pp, dp_replicate, tp and dp_shard_cp's coordinate / ep.
  const int c = coord(Axis::dp_shard_cp), groups = shape_.size(Axis::dp_shard_cp) / shape_.ep;
  const int ep_color = ((coords_[0] * shape_.dp_replicate + coords_[1]) * groups + c / shape_.ep) * shape_.tp + coords_[4];
  axes_[static_cast<size_t>(Axis::ep)] = world.split(ep_color, coord(Axis::ep), "ep");
  if (shape_.ep == 1) {
    axes_[static_cast<size_t>(Axis::edp)] = axes_[static_cast<size_t>(Axis::dp_cp)];
    axes_[static_cast<size_t>(Axis::edp_shard)] = axes_[static_cast<size_t>(Axis::dp_shard_cp)];
  } else {  // edp: the ranks sharing pp, tp and the ep coordinate; edp_shard: also dp_replicate
    const int edp_color = (coords_[0] * shape_.ep + coord(Axis::ep)) * shape_.tp + coords_[4];
    axes_[static_cast<size_t>(Axis::edp)] = world.split(edp_color, coord(Axis::edp), "edp");
    const int edp_shard_color =
        ((coords_[0] * shape_.dp_replicate + coords_[1]) * shape_.ep + coord(Axis::ep)) * shape_.tp + coords_[4];
    axes_[static_cast<size_t>(Axis::edp_shard)] = world.split(edp_shard_color, coord(Axis::edp_shard), "edp_shard");
  }
}

int DeviceMesh::coord(Axis axis) const {
  if (axis == Axis::dp) return coords_[1] * shape_.dp_shard + coords_[2];
  if (axis == Axis::dp_shard_cp) return coords_[2] * shape_.cp + coords_[3];
  if (axis == Axis::dp_cp) return coord(Axis::dp) * shape_.cp + coords_[3];
  if (axis == Axis::ep) return coord(Axis::dp_shard_cp) % shape_.ep;
  if (axis == Axis::edp_shard) return coord(Axis::dp_shard_cp) / shape_.ep;
  if (axis == Axis::edp) {
    return coords_[1] * (shape_.size(Axis::dp_shard_cp) / shape_.ep) + coord(Axis::dp_shard_cp) / shape_.ep;
  }
  return coords_[static_cast<size_t>(axis)];
}

}  // namespace ndt
