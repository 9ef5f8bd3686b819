// DeviceMesh: the world's ranks arranged on named axes in the fixed order
// pp, dp_replicate, dp_shard, cp, tp (tp innermost, so tensor-parallel peers are
// neighbouring ranks, on one node). One communicator per axis, plus "dp", the
// flattening dp_replicate x dp_shard that data parallelism reduces over.
#pragma once

#include "comm/communicator.h"
#include "core/axis.h"

#include <array>
#include <memory>
#include <string>
#include <string_view>

namespace ndt {

struct MeshShape {
  int pp = 1;
  int dp_replicate = 1;
  int dp_shard = 1;
  int cp = 1;
  int tp = 1;

  int size(Axis axis) const;  // also Axis::dp = dp_replicate x dp_shard
  int64_t product() const { return int64_t{pp} * dp_replicate * dp_shard * cp * tp; }
  std::string str() const;  // "pp=1 x dp_replicate=2 x dp_shard=1 x cp=1 x tp=1"
  // Throws unless every size is positive and the product equals world_size, naming the sizes.
  void validate(int world_size) const;
};

class DeviceMesh {
 public:
  // Collective over `world`: every rank builds the same mesh. World rank r sits at
  // the row-major coordinates of r in (pp, dp_replicate, dp_shard, cp, tp).
  DeviceMesh(Communicator& world, const MeshShape& shape);

  const MeshShape& shape() const { return shape_; }
  Communicator& world() { return world_; }
  // The communicator along an axis (Axis::dp: the flattened data-parallel group).
  Communicator& axis(Axis axis) { return *axes_[static_cast<size_t>(axis)]; }
  // This rank's coordinate along an axis (for dp: dp_replicate_coord * dp_shard + dp_shard_coord).
  int coord(Axis axis) const;
  int size(Axis axis) const { return shape_.size(axis); }

 private:
  Communicator& world_;
  MeshShape shape_;
  std::array<int, 5> coords_{};
  std::array<std::unique_ptr<Communicator>, 6> axes_;  // indexed by Axis
};

}  // namespace ndt
