// All-to-all with per-peer counts, flat or hierarchical (MoESys Fig. 8), with its exact reverse.
//
// Expert-parallel dispatch sends each rank a variable number of token rows; the combine sends them
// back. Both run through one AllToAllPlan:
//   1. MakePlan (collective): all-gathers every rank's send counts (one small all-gather of
//      size() integers per rank on the host communicator), so every rank knows the full count
//      matrix, and builds this rank's schedule.
//   2. Forward: send (ordered by destination rank) -> recv (ordered by source rank). The output is
//      identical for both algorithms: recv holds, for each source s in rank order, the
//      plan.count(s, rank()) elements s sent here.
//   3. Reverse: the exact inverse path (the combine): recv layout -> send layout.
//
// Flat: one AllToAllV over the world communicator.
// Hierarchical, on N nodes of L ranks (Topology):
//   stage 1  pack by destination local rank, then an intra-node all-to-all: local rank l
//            gathers everything its node sends to local rank l of every node;
//   stage 2  transpose the gathered blocks to destination-node order, then an inter-node
//            all-to-all among the ranks with the same local rank (one message per node pair
//            instead of L*L);
//   stage 3  the local redistribution into per-source rank order (a no-op when ranks are
//            numbered node-major, as emulated nodes and the usual mpirun mapping are).
// Copies that would be identities (one node, one rank per node, node-major numbering) are left
// out. The hierarchy wins only where the inter-node link is much slower than the intra-node one:
// it pays two local copies and two latency terms to send fewer, larger inter-node messages.
//
// Buffers are in the communicators' memory space (host for mpi/local, device for nccl). The
// caller provides the workspace (plan.workspace_bytes(), 0 for flat); send, recv and workspace
// must not overlap. Every rank calls Forward/Reverse, even one with nothing to send or receive.
//
// Ownership: AllToAll does not own the topology or communicators, which must outlive it; plans are
// values. Thread-safety: one thread at a time (the communicators' rule).
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/topology.h"
#include "runtime/core/status.h"

namespace sy {

enum class AllToAllAlgorithm : uint8_t {
  kFlat,          // one AllToAllV over all ranks
  kHierarchical,  // intra-node, then inter-node (MoESys Fig. 8)
};

std::string_view AllToAllAlgorithmName(AllToAllAlgorithm algorithm);  // "flat", "hierarchical"
// Parses a config value: "flat" or "hierarchical".
Result<AllToAllAlgorithm> ParseAllToAllAlgorithm(std::string_view text);

// The buffers a schedule step reads and writes (for Reverse, input and output swap roles).
enum class AllToAllBuffer : uint8_t { kInput, kOutput, kWork0, kWork1 };
// The communicator an exchange step runs on.
enum class AllToAllGroup : uint8_t { kWorld, kIntraNode, kInterNode };

// One step of a rank's schedule. Exposed so tests can execute and inspect schedules.
struct AllToAllStep {
  enum class Kind : uint8_t { kExchange, kCopy };
  Kind kind = Kind::kExchange;
  AllToAllGroup group = AllToAllGroup::kWorld;  // kExchange only
  AllToAllBuffer src = AllToAllBuffer::kInput;
  AllToAllBuffer dst = AllToAllBuffer::kOutput;
  // kExchange: bytes per peer of `group` (indexed by rank in that communicator).
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
  // kCopy: blocks from src to dst.
  std::vector<BlockCopy> copies;
};

class AllToAllPlan {
 public:
  AllToAllAlgorithm algorithm() const { return algorithm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t elem_bytes() const { return elem_bytes_; }

  // Elements rank `src` sends rank `dst`.
  size_t count(int src, int dst) const;
  // This rank's send layout (by destination) and recv layout (by source), in elements.
  std::span<const size_t> send_counts() const { return send_counts_; }
  std::span<const size_t> send_displs() const { return send_displs_; }
  std::span<const size_t> recv_counts() const { return recv_counts_; }
  std::span<const size_t> recv_displs() const { return recv_displs_; }
  size_t send_elements() const { return send_elements_; }
  size_t recv_elements() const { return recv_elements_; }

  // Bytes of workspace Forward and Reverse need (0 for flat).
  size_t workspace_bytes() const { return workspace_bytes_; }
  // Where kWork1 starts inside the workspace (kWork0 starts at 0). A multiple of 256.
  size_t work1_offset() const { return work1_offset_; }
  const std::vector<AllToAllStep>& steps() const { return steps_; }

  // Builds the plan for `rank` from the full count matrix (counts[src * size + dst] elements of
  // elem_bytes each). Pure and local. InvalidArgument for a malformed matrix or elem_bytes == 0,
  // FailedPrecondition for kHierarchical on nodes of unequal size.
  static Result<AllToAllPlan> Build(AllToAllAlgorithm algorithm, const NodeLayout& layout, int rank,
                                    std::span<const size_t> counts, size_t elem_bytes);

 private:
  AllToAllPlan() = default;

  AllToAllAlgorithm algorithm_ = AllToAllAlgorithm::kFlat;
  int rank_ = 0;
  int size_ = 0;
  size_t elem_bytes_ = 0;
  std::vector<size_t> counts_;  // size_ x size_, elements
  std::vector<size_t> send_counts_, send_displs_, recv_counts_, recv_displs_;
  size_t send_elements_ = 0;
  size_t recv_elements_ = 0;
  size_t workspace_bytes_ = 0;
  size_t work1_offset_ = 0;
  std::vector<AllToAllStep> steps_;
};

std::ostream& operator<<(std::ostream& os, const AllToAllStep& step);

class AllToAll {
 public:
  // Flat over `world` alone (no topology needed).
  static AllToAll Flat(Communicator& world);
  // Over a topology's world, intra-node and inter-node communicators. FailedPrecondition for
  // kHierarchical when the nodes have unequal numbers of ranks.
  static Result<AllToAll> Create(const Topology& topology, AllToAllAlgorithm algorithm);

  AllToAllAlgorithm algorithm() const { return algorithm_; }
  const NodeLayout& layout() const { return layout_; }

  // Collective: exchanges the counts (send_counts[p] elements of elem_bytes bytes for rank p)
  // over world().host() and builds this rank's plan.
  Result<AllToAllPlan> MakePlan(std::span<const size_t> send_counts, size_t elem_bytes);

  // Collective. send: plan.send_elements() elements by destination; recv: plan.recv_elements()
  // by source; workspace: plan.workspace_bytes() (may be null when that is 0).
  Status Forward(const AllToAllPlan& plan, const void* send, void* recv, void* workspace);
  // Collective. The inverse: `recv_side` in Forward's recv layout goes back to the ranks that sent
  // it, landing in `send_side` in Forward's send layout.
  Status Reverse(const AllToAllPlan& plan, const void* recv_side, void* send_side, void* workspace);
  // Stream-ordered forms (see Communicator: enqueued on nccl, synchronous on mpi and local).
  Status ForwardAsync(const AllToAllPlan& plan, const void* send, void* recv, void* workspace,
                      Stream& stream);
  Status ReverseAsync(const AllToAllPlan& plan, const void* recv_side, void* send_side,
                      void* workspace, Stream& stream);

 private:
  AllToAll(AllToAllAlgorithm algorithm, NodeLayout layout, Communicator* world, Communicator* intra,
           Communicator* inter);

  Status Run(const AllToAllPlan& plan, const void* input, void* output, void* workspace,
             bool reverse, Stream* stream);
  Communicator& GroupComm(AllToAllGroup group) const;

  AllToAllAlgorithm algorithm_;
  NodeLayout layout_;
  Communicator* world_;
  Communicator* intra_;
  Communicator* inter_;
};

}  // namespace sy
