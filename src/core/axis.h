// The mesh axes, by name in one enum rather than string literals. The device mesh
// lays the world out in the fixed order pp, dp_replicate, dp_shard, cp, tp (tp
// innermost, so tensor-parallel peers are neighbouring ranks); dp is not an axis of
// its own but the flattening dp_replicate x dp_shard, over which data parallelism
// splits the batch. Expert parallelism will add ep here (carved out of the
// data-parallel ranks) when it lands.
#pragma once

#include <array>
#include <string_view>

namespace ndt {

enum class Axis { pp, dp_replicate, dp_shard, cp, tp, dp };

// The five mesh axes in mesh order (dp, a flattening, is not among them).
inline constexpr std::array<Axis, 5> kMeshAxes = {Axis::pp, Axis::dp_replicate, Axis::dp_shard, Axis::cp, Axis::tp};

// "pp", "dp_replicate", "dp_shard", "cp", "tp", "dp": the names of the config keys
// (parallel.<name>), of the communicators' counters and of the metrics.
constexpr std::string_view axis_name(Axis axis) {
  switch (axis) {
    case Axis::pp: return "pp";
    case Axis::dp_replicate: return "dp_replicate";
    case Axis::dp_shard: return "dp_shard";
    case Axis::cp: return "cp";
    case Axis::tp: return "tp";
    case Axis::dp: return "dp";
  }
  return "?";
}

}  // namespace ndt
