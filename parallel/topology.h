// Topology: which node each rank runs on, and the communicators that follow from it.
//
// Real nodes are the groups of ranks that share memory (MPI_Comm_split_type with
// MPI_COMM_TYPE_SHARED, through Communicator::NodeLeader). TopologyOptions::ranks_per_node > 0
// emulates nodes instead: consecutive ranks [k*N, (k+1)*N) form node k, so a 2-node x 2-rank
// cluster runs on one machine and every hierarchical code path can be tested there.
//
// Nodes are numbered by their lowest rank; local ranks follow rank order within a node. The
// intra-node communicator holds this node's ranks ordered by local rank; the inter-node
// communicator holds the ranks with this rank's local rank on every node, ordered by node.
//
// NodeLayout is the value part (who is where); Topology owns the two sub-communicators.
// Ownership: Topology::world() is not owned and must outlive the Topology; the sub-communicators
// are owned. Thread-safety: NodeLayout is a value; Topology follows the communicator rules.
#pragma once

#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "runtime/core/status.h"

namespace sy {

struct TopologyOptions {
  // Ranks per emulated node; 0 = group ranks by the real node they run on. Must divide the
  // communicator size. Default: 0.
  int ranks_per_node = 0;
};

class NodeLayout {
 public:
  // Consecutive groups of `ranks_per_node` ranks (InvalidArgument when it does not divide size).
  static Result<NodeLayout> Emulated(int size, int ranks_per_node);
  // node_key[r] is equal for ranks on the same node and differs across nodes (the node leader).
  static NodeLayout FromNodeKeys(std::span<const int> node_key);

  int size() const { return static_cast<int>(node_of_.size()); }
  int num_nodes() const { return static_cast<int>(ranks_of_node_.size()); }
  int node_of(int rank) const;
  int local_rank_of(int rank) const;
  int node_size(int node) const;
  // The rank with `local_rank` on `node`, or -1 when that node is smaller.
  int rank_of(int node, int local_rank) const;
  // Every node has the same number of ranks.
  bool uniform() const;
  // Ranks per node when uniform(), else 0.
  int ranks_per_node() const;
  // rank == node * ranks_per_node() + local_rank for every rank.
  bool contiguous() const;
  bool emulated() const { return emulated_; }

  // "2 nodes x 2 ranks (emulated)", "1 node x 4 ranks", "2 nodes of 3,1 ranks".
  std::string ToString() const;

  bool operator==(const NodeLayout& other) const = default;

 private:
  NodeLayout() = default;

  std::vector<int> node_of_;
  std::vector<int> local_of_;
  std::vector<std::vector<int>> ranks_of_node_;
  bool emulated_ = false;
};

std::ostream& operator<<(std::ostream& os, const NodeLayout& layout);

class Topology {
 public:
  // Collective over `world`. InvalidArgument when options.ranks_per_node is negative or does not
  // divide world.size().
  static Result<std::unique_ptr<Topology>> Create(Communicator& world,
                                                  const TopologyOptions& options = {});

  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  Communicator& world() const { return *world_; }
  Communicator& intra_node() const { return *intra_; }
  Communicator& inter_node() const { return *inter_; }
  const NodeLayout& layout() const { return layout_; }

  int rank() const { return world_->rank(); }
  int node() const { return layout_.node_of(world_->rank()); }
  int local_rank() const { return layout_.local_rank_of(world_->rank()); }
  int num_nodes() const { return layout_.num_nodes(); }

 private:
  Topology(Communicator& world, NodeLayout layout, std::unique_ptr<Communicator> intra,
           std::unique_ptr<Communicator> inter);

  Communicator* world_;
  NodeLayout layout_;
  std::unique_ptr<Communicator> intra_;
  std::unique_ptr<Communicator> inter_;
};

}  // namespace sy
