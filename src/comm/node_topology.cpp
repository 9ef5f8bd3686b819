#include "comm/node_topology.h"

#include "core/error.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>

namespace ndt {

int NodeTopology::ranks_on_node(int node) const {
  return static_cast<int>(std::count(node_of_rank.begin(), node_of_rank.end(), node));
}

int NodeTopology::ranks_per_node() const {
  int fewest = static_cast<int>(node_of_rank.size());
  for (int n = 0; n < nodes(); ++n) fewest = std::min(fewest, ranks_on_node(n));
  return fewest;
}

bool NodeTopology::uniform() const {
  for (int n = 0; n < nodes(); ++n) {
    if (ranks_on_node(n) != ranks_on_node(0)) return false;
  }
  return true;
}

std::string NodeTopology::describe() const {
  std::string hosts, counts;
  for (int n = 0; n < nodes(); ++n) {
    hosts += fmt::format("{}{}", n ? ", " : "", host_names[static_cast<size_t>(n)]);
    counts += fmt::format("{}{}", n ? ", " : "", ranks_on_node(n));
  }
  const std::string ranks = uniform() ? fmt::format("{} rank{}", ranks_on_node(0), ranks_on_node(0) == 1 ? "" : "s")
                                      : fmt::format("ranks {}", counts);
  return fmt::format("{} node{} ({}) x {}", nodes(), nodes() == 1 ? "" : "s", hosts, ranks);
}

NodeTopology NodeTopology::single_node(int world_size, std::string host_name) {
  return {std::vector<int>(static_cast<size_t>(world_size), 0), {std::move(host_name)}};
}

std::string local_host_name() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0 || name[0] == '\0') return "?";
  return name.data();
}

NodeTopology detect_node_topology(Communicator& world) {
  const std::unique_ptr<Communicator> own = world.split(0, world.rank(), "topology");
  const std::unique_ptr<Communicator> node = own->split_by_node("node");
  // Each node is named by its lowest world rank.
  int32_t lowest = own->rank();
  node->all_reduce(&lowest, 1, DType::i32, ReduceOp::min);
  std::vector<int32_t> lowest_of(static_cast<size_t>(own->size()));
  own->all_gather(&lowest, lowest_of.data(), 1, DType::i32);
  // Host names as 128 16-bit words (the communicator's smallest type) each.
  constexpr size_t kWords = 128;
  std::array<char, 2 * kWords> mine{};
  const std::string host = local_host_name();
  std::memcpy(mine.data(), host.data(), std::min(host.size(), mine.size() - 1));
  std::vector<char> names(mine.size() * static_cast<size_t>(own->size()));
  own->all_gather(mine.data(), names.data(), kWords, DType::u16);

  NodeTopology t;
  std::map<int, int> node_of_lowest;  // in rank order: node numbers follow the lowest ranks
  for (int32_t l : lowest_of) node_of_lowest.emplace(l, 0);
  for (auto& [l, n] : node_of_lowest) {
    n = static_cast<int>(t.host_names.size());
    t.host_names.emplace_back(names.data() + static_cast<size_t>(l) * mine.size());
  }
  for (int32_t l : lowest_of) t.node_of_rank.push_back(node_of_lowest.at(l));
  return t;
}

}  // namespace ndt
