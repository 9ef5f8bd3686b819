// Which ranks share a node: a host, one memory, where ranks talk through shared memory
// and anything between nodes crosses a network link. Learned once at start-up from MPI
// (MPI_Comm_split_type with shared memory, and the host names), so that the mesh can
// say which axes' groups stay inside a node and which cross (the run header prints it),
// layouts that must stay inside a node are checked, the hierarchical data-parallel
// reduction knows its two levels, and threads = 0 divides each node's own cores.
#pragma once

#include "comm/communicator.h"

#include <string>
#include <vector>

namespace ndt {

struct NodeTopology {
  std::vector<int> node_of_rank;        // world rank -> node index (nodes numbered by their lowest rank)
  std::vector<std::string> host_names;  // node index -> its host name

  int nodes() const { return static_cast<int>(host_names.size()); }
  int ranks_on_node(int node) const;
  // The fewest ranks any node holds (all nodes hold as many on a regular cluster).
  int ranks_per_node() const;
  bool uniform() const;  // every node holds as many ranks
  // "1 node (vm) x 4 ranks", "2 nodes (host-a, host-b) x 2 ranks", or uneven counts listed.
  std::string describe() const;

  // One node holding world_size ranks (no MPI: the one-rank mesh, tests, the planner).
  static NodeTopology single_node(int world_size, std::string host_name);
};

// Collective over world. Uses a private duplicate of it, so world's counters stay as
// they were.
NodeTopology detect_node_topology(Communicator& world);

// This host's name (gethostname), "?" if it has none.
std::string local_host_name();

}  // namespace ndt
