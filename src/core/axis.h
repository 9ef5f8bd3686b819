// The mesh axes, by name in one enum rather than string literals. The device mesh
// lays the world out in the fixed order pp, dp_replicate, dp_shard, cp, tp (tp
// innermost, so tensor-parallel peers are neighbouring ranks). Three flattenings are
// not axes of their own: dp = dp_replicate x dp_shard, over which data parallelism
// splits the batch; and, since context-parallel ranks hold the same parameters and
// each computes the gradient of its part of the tokens, dp_shard_cp = dp_shard x cp,
// over which ZeRO and FSDP shard (as torchtitan does), and dp_cp = dp x cp, over which
// gradients are reduced. Without cp they are dp_shard and dp themselves.
// Expert parallelism adds two groups that are not mesh axes either. ep borrows its
// ranks from dp_shard_cp rather than being a factor of the world size: the rank at
// coordinate c of dp_shard_cp has ep coordinate c % ep, and its ep group is the ep
// ranks sharing c / ep (and every other coordinate); the routed experts are split
// and tokens exchanged over it. edp (expert data parallel) is the ranks holding the
// same experts, the dp_cp ranks with the same ep coordinate (dp_cp / ep of them),
// over which the experts' gradients are reduced. With ep = 1, edp is dp_cp.
// edp_shard is edp within one replica: the dp_shard_cp ranks with the same ep
// coordinate (dp_shard_cp / ep of them), over which ZeRO and FSDP shard the experts
// as they shard the other parameters over dp_shard_cp. With ep = 1, it is dp_shard_cp.
// USP (parallel.cp_mode = "usp", docs/context_parallel.md) splits cp in two: cp_ulysses,
// groups of cp_ulysses consecutive cp ranks (one node) that exchange heads by all-to-all,
// and cp_ring, the cp / cp_ulysses ranks with the same cp_ulysses coordinate, around
// which the ring attention passes K/V. Without USP, cp_ulysses is each rank alone and
// cp_ring is cp itself.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace ndt {

enum class Axis { pp, dp_replicate, dp_shard, cp, tp, dp, dp_shard_cp, dp_cp, ep, edp, edp_shard, cp_ulysses, cp_ring };
// The mesh axes, the flattenings, the expert groups and USP's two parts of cp.
inline constexpr size_t kNumAxes = 13;

// The five mesh axes in mesh order (dp, a flattening, is not among them).
inline constexpr std::array<Axis, 5> kMeshAxes = {Axis::pp, Axis::dp_replicate, Axis::dp_shard, Axis::cp, Axis::tp};

// "pp", "dp_replicate", "dp_shard", "cp", "tp", "dp", "dp_shard_cp", "dp_cp", "ep", "edp", "edp_shard",
// "cp_ulysses", "cp_ring": the names of the config keys (parallel.<name>; edp, edp_shard and cp_ring are not), of
// the communicators' counters and of the metrics.
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
    case Axis::ep: return "ep";
    case Axis::edp: return "edp";
    case Axis::edp_shard: return "edp_shard";
    case Axis::cp_ulysses: return "cp_ulysses";
    case Axis::cp_ring: return "cp_ring";
  }
  return "?";
}

}  // namespace ndt
