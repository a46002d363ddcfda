#include "parallel/topology.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

namespace sy {

Result<NodeLayout> NodeLayout::Emulated(int size, int ranks_per_node) {
  if (ranks_per_node <= 0 || size % ranks_per_node != 0) {
    return InvalidArgumentError(fmt::format(
        "topology.ranks_per_node = {} does not divide the {} ranks; use a divisor of {} to emulate "
        "nodes, or 0 to group ranks by the real node they run on",
        ranks_per_node, size, size));
  }
  std::vector<int> keys(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) keys[r] = r / ranks_per_node;
  NodeLayout layout = FromNodeKeys(keys);
  layout.emulated_ = true;
  return layout;
}

NodeLayout NodeLayout::FromNodeKeys(std::span<const int> node_key) {
  NodeLayout layout;
  // Keys in order of first appearance are the nodes in order of their lowest rank.
  std::map<int, int> node_of_key;
  layout.node_of_.resize(node_key.size());
  layout.local_of_.resize(node_key.size());
  for (size_t r = 0; r < node_key.size(); ++r) {
    auto [it, inserted] = node_of_key.try_emplace(node_key[r], layout.num_nodes());
    if (inserted) layout.ranks_of_node_.emplace_back();
    const int node = it->second;
    layout.node_of_[r] = node;
    layout.local_of_[r] = static_cast<int>(layout.ranks_of_node_[node].size());
    layout.ranks_of_node_[node].push_back(static_cast<int>(r));
  }
  return layout;
}

int NodeLayout::node_of(int rank) const {
  SY_CHECK(rank >= 0 && rank < size()) << "rank " << rank << " outside a layout of " << size();
  return node_of_[rank];
}

int NodeLayout::local_rank_of(int rank) const {
  SY_CHECK(rank >= 0 && rank < size()) << "rank " << rank << " outside a layout of " << size();
  return local_of_[rank];
}

int NodeLayout::node_size(int node) const {
  SY_CHECK(node >= 0 && node < num_nodes()) << "node " << node << " of " << num_nodes();
  return static_cast<int>(ranks_of_node_[node].size());
}

int NodeLayout::rank_of(int node, int local_rank) const {
  SY_CHECK(node >= 0 && node < num_nodes()) << "node " << node << " of " << num_nodes();
  if (local_rank < 0 || local_rank >= node_size(node)) return -1;
  return ranks_of_node_[node][local_rank];
}

bool NodeLayout::uniform() const {
  return std::all_of(ranks_of_node_.begin(), ranks_of_node_.end(), [&](const auto& ranks) {
    return ranks.size() == ranks_of_node_.front().size();
  });
}

int NodeLayout::ranks_per_node() const {
  if (ranks_of_node_.empty() || !uniform()) return 0;
  return static_cast<int>(ranks_of_node_.front().size());
}

bool NodeLayout::contiguous() const {
  const int per_node = ranks_per_node();
  if (per_node == 0) return false;
  for (int r = 0; r < size(); ++r) {
    if (r != node_of_[r] * per_node + local_of_[r]) return false;
  }
  return true;
}

std::string NodeLayout::ToString() const {
  std::string text;
  const int nodes = num_nodes();
  if (uniform()) {
    text = fmt::format("{} node{} x {} rank{}", nodes, nodes == 1 ? "" : "s", ranks_per_node(),
                       ranks_per_node() == 1 ? "" : "s");
  } else {
    std::vector<size_t> sizes;
    for (const auto& ranks : ranks_of_node_) sizes.push_back(ranks.size());
    text = fmt::format("{} nodes of {} ranks", nodes, fmt::join(sizes, ","));
  }
  if (emulated_) text += " (emulated)";
  return text;
}

std::ostream& operator<<(std::ostream& os, const NodeLayout& layout) {
  return os << layout.ToString();
}

Topology::Topology(Communicator& world, NodeLayout layout, std::unique_ptr<Communicator> intra,
                   std::unique_ptr<Communicator> inter)
    : world_(&world),
      layout_(std::move(layout)),
      intra_(std::move(intra)),
      inter_(std::move(inter)) {}

Result<std::unique_ptr<Topology>> Topology::Create(Communicator& world,
                                                   const TopologyOptions& options) {
  if (options.ranks_per_node < 0) {
    return InvalidArgumentError(fmt::format(
        "topology.ranks_per_node = {} is negative; use 0 for real nodes or a divisor of {} to "
        "emulate nodes",
        options.ranks_per_node, world.size()));
  }
  std::optional<NodeLayout> layout;
  if (options.ranks_per_node > 0) {
    SY_ASSIGN_OR_RETURN(layout, NodeLayout::Emulated(world.size(), options.ranks_per_node));
  } else {
    SY_ASSIGN_OR_RETURN(int leader, world.NodeLeader());
    std::vector<int> leaders(static_cast<size_t>(world.size()));
    SY_RETURN_IF_ERROR(world.host().AllGather<int32_t>(std::span<const int32_t>(&leader, 1),
                                                       std::span<int32_t>(leaders)));
    layout = NodeLayout::FromNodeKeys(leaders);
  }
  const int rank = world.rank();
  const int node = layout->node_of(rank);
  const int local = layout->local_rank_of(rank);
  SY_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> intra, world.Split(node, local));
  SY_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> inter, world.Split(local, node));
  SY_CHECK(intra != nullptr && inter != nullptr) << "Split returned no communicator";
  SY_CHECK_EQ(intra->size(), layout->node_size(node)) << "intra-node communicator size";
  SY_CHECK_EQ(intra->rank(), local) << "intra-node rank must be the local rank";
  if (layout->uniform()) {
    SY_CHECK_EQ(inter->rank(), node) << "inter-node rank must be the node index";
  }
  return std::unique_ptr<Topology>(
      new Topology(world, std::move(*layout), std::move(intra), std::move(inter)));
}

}  // namespace sy
