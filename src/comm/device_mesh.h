// DeviceMesh: the world's ranks arranged on named axes in the fixed order
// pp, dp_replicate, dp_shard, cp, tp (tp innermost, so tensor-parallel peers are
// neighbouring ranks, on one node). One communicator per axis, plus the flattenings
// dp (dp_replicate x dp_shard: data parallelism splits the batch over it), dp_shard_cp
// and dp_cp (with the context-parallel ranks: parameters are sharded and gradients
// reduced over them; core/axis.h).
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

  int size(Axis axis) const;  // also the flattenings dp, dp_shard_cp and dp_cp (core/axis.h)
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
  // The communicator along an axis or flattening (without cp, dp_shard_cp is dp_shard's
  // communicator and dp_cp is dp's: the same object, the same counters).
  Communicator& axis(Axis axis) { return *axes_[static_cast<size_t>(axis)]; }
  // This rank's coordinate along an axis (a flattening: row-major over its axes, e.g. dp:
  // dp_replicate_coord * dp_shard + dp_shard_coord).
  int coord(Axis axis) const;
  int size(Axis axis) const { return shape_.size(axis); }

 private:
  Communicator& world_;
  MeshShape shape_;
  std::array<int, 5> coords_{};
  std::array<std::shared_ptr<Communicator>, 8> axes_;  // indexed by Axis
};

}  // namespace ndt
