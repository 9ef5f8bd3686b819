// The mesh axes, by name in one enum rather than string literals. The device mesh
// lays the world out in the fixed order pp, dp_replicate, dp_shard, cp, tp (tp
// innermost, so tensor-parallel peers are neighbouring ranks). Three flattenings are
// not axes of their own: dp = dp_replicate x dp_shard, over which data parallelism
// splits the batch; and, since context-parallel ranks hold the same parameters and
// each computes the gradient of its part of the tokens, dp_shard_cp = dp_shard x cp,
// over which ZeRO and FSDP shard (as torchtitan does), and dp_cp = dp x cp, over which
// gradients are reduced. Without cp they are dp_shard and dp themselves. Expert
// parallelism will add ep here (carved out of the data-parallel ranks) when it lands.
#pragma once

#include <array>
#include <string_view>

namespace ndt {

enum class Axis { pp, dp_replicate, dp_shard, cp, tp, dp, dp_shard_cp, dp_cp };

// The five mesh axes in mesh order (dp, a flattening, is not among them).
inline constexpr std::array<Axis, 5> kMeshAxes = {Axis::pp, Axis::dp_replicate, Axis::dp_shard, Axis::cp, Axis::tp};

// "pp", "dp_replicate", "dp_shard", "cp", "tp", "dp", "dp_shard_cp", "dp_cp": the names of the config keys
// (parallel.<name>), of the communicators' counters and of the metrics.
constexpr std::string_view axis_name(Axis axis) {
  switch (axis) {
    case Axis::pp: return "pp";
    case Axis::dp_replicate: return "dp_replicate";
    case Axis::dp_shard: return "dp_shard";
    case Axis::cp: return "cp";
    case Axis::tp: return "tp";
    case Axis::dp: return "dp";
    case Axis::dp_shard_cp: return "dp_shard_cp";
    case Axis::dp_cp: return "dp_cp";
  }
  return "?";
}

}  // namespace ndt
