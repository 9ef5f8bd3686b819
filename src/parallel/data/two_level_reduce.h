// The data-parallel all-reduce in two levels, for a group whose ranks sit on several
// nodes (the hierarchical reduction of NCCL and of Open MPI's han): a reduce-scatter
// among the group's ranks on each node, an all-reduce of each shard across the nodes
// (between the ranks holding the same shard, one per node), then an all-gather on each
// node. Nothing changes but the route: the sum is the group's sum (in another order).
// Splits: a bucket of P bytes into k shards (k: the group's ranks on a node).
// Communicates, per rank: inside the node (k-1)/k x P for the reduce-scatter and as much
// for the all-gather; across nodes 2(N-1)/N x P/k (N nodes). The flat ring sends
// 2(n-1)/n x P per rank (n = N k), all of it across nodes from the ranks whose ring
// neighbour is on another node: N of them carry 2(n-1)/n x P over the nodes' links,
// where the two levels carry 2(N-1)/N x P per node.
// Memory: while a bucket is in flight, the bucket rounded up to a multiple of k and one
// shard of it (tag comm).
#pragma once

#include "comm/communicator.h"
#include "core/tensor.h"

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace ndt {

// parallel.dp_reduction: how DDP's gradient all-reduce runs when the data-parallel group
// crosses nodes. flat: one all-reduce over the group; hierarchical: the two levels below;
// auto: whichever measures faster on a bucket at start-up (one node: flat, nothing to
// choose). The names are the config's; from_name throws naming the key and the choices.
enum class DpReduction { automatic, flat, hierarchical };
std::string_view dp_reduction_name(DpReduction reduction);
DpReduction dp_reduction_from_name(std::string_view name);

class TwoLevelAllReduce {
 public:
  // Collective over group. Throws unless every node holds as many of its ranks.
  explicit TwoLevelAllReduce(Communicator& group);

  // The sum over the group of buf[count] (f32), in place. Non-blocking: test() advances
  // the three stages, wait() runs them to the end; buf must stay valid until then.
  WorkHandle start(float* buf, size_t count);

  Communicator& inside() { return *inside_; }  // the group's ranks on this node
  Communicator& across() { return *across_; }  // the ranks holding this rank's shard, one per node
  // Moves the two levels' counters into the group's (its axis's metrics then show the
  // reduce-scatters, all-reduces and all-gathers, with the bytes that crossed nodes).
  void fold_counters();

 private:
  Communicator& group_;
  std::unique_ptr<Communicator> inside_, across_;
};

// The measured rule of parallel.dp_reduction = auto: a flat all-reduce and the two levels
// of `floats` f32 values, alternated three times each; the medians, the slowest rank's
// (collective over group: every rank decides alike).
struct ReductionTiming {
  double flat_s = 0, hierarchical_s = 0;
  bool hierarchical_faster() const { return hierarchical_s < flat_s; }
  std::string describe(size_t bytes) const;  // "hierarchical: 12.3 ms against flat 20.1 ms for 25.0 MiB"
};
ReductionTiming time_reductions(Communicator& group, TwoLevelAllReduce& levels, size_t floats);

}  // namespace ndt
