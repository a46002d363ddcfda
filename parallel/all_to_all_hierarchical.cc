// The hierarchical all-to-all schedule (MoESys Fig. 8). See parallel/all_to_all.h for the stages.
//
// Notation: N nodes of L ranks, R(n, l) the rank with local rank l on node n, C(s, d) the bytes
// rank s sends rank d, and this rank me = R(n0, l0). Logical buffers:
//   0  input   blocks by destination rank d = 0..P-1
//   1  packed  blocks grouped by destination local rank: [l'][n'] -> block C(me, R(n', l'))
//   2  gathered after the intra-node exchange: [l][n'] -> block C(R(n0, l), R(n', l0))
//   3  routed   the same blocks by destination node:   [n'][l]
//   4  arrived  after the inter-node exchange: [n][l] -> block C(R(n, l), me)
//   5  output   blocks by source rank s = 0..P-1
#include <numeric>

#include "parallel/all_to_all_schedule.h"
#include "runtime/core/check.h"

namespace sy::internal {
namespace {

std::vector<size_t> PrefixSums(const std::vector<size_t>& counts) {
  std::vector<size_t> displs(counts.size(), 0);
  std::exclusive_scan(counts.begin(), counts.end(), displs.begin(), size_t{0});
  return displs;
}

size_t Sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); }

// An exchange on a one-rank group is a copy of the block it sends itself.
AllToAllStep ExchangeOrSelfCopy(AllToAllGroup group, std::vector<size_t> send_counts,
                                std::vector<size_t> recv_counts) {
  AllToAllStep step;
  if (send_counts.size() == 1) {
    SY_CHECK_EQ(send_counts[0], recv_counts[0]) << "a rank sends itself what it receives";
    step.kind = AllToAllStep::Kind::kCopy;
    step.copies.push_back({0, 0, send_counts[0]});
    return step;
  }
  step.kind = AllToAllStep::Kind::kExchange;
  step.group = group;
  step.send_displs = PrefixSums(send_counts);
  step.recv_displs = PrefixSums(recv_counts);
  step.send_counts = std::move(send_counts);
  step.recv_counts = std::move(recv_counts);
  return step;
}

ChainStep CopyStep(int src, int dst) {
  ChainStep c;
  c.step.kind = AllToAllStep::Kind::kCopy;
  c.src = src;
  c.dst = dst;
  return c;
}

}  // namespace

Schedule BuildHierarchicalSchedule(const NodeLayout& layout, int rank,
                                   std::span<const size_t> byte_counts) {
  SY_CHECK(layout.uniform()) << "the hierarchical all-to-all needs nodes of equal size";
  const int P = layout.size();
  const int N = layout.num_nodes();
  const int L = layout.ranks_per_node();
  const int n0 = layout.node_of(rank);
  const int l0 = layout.local_rank_of(rank);
  auto C = [&](int src, int dst) { return byte_counts[static_cast<size_t>(src) * P + dst]; };
  auto R = [&](int node, int local) { return layout.rank_of(node, local); };

  std::vector<size_t> input_counts(P), output_counts(P);
  for (int g = 0; g < P; ++g) {
    input_counts[g] = C(rank, g);
    output_counts[g] = C(g, rank);
  }
  const std::vector<size_t> input_displs = PrefixSums(input_counts);
  const std::vector<size_t> output_displs = PrefixSums(output_counts);

  std::vector<ChainStep> chain;

  // Stage 1a: pack by destination local rank.
  {
    ChainStep pack = CopyStep(0, 1);
    size_t offset = 0;
    for (int l = 0; l < L; ++l) {
      for (int n = 0; n < N; ++n) {
        const int g = R(n, l);
        pack.step.copies.push_back({input_displs[g], offset, C(rank, g)});
        offset += C(rank, g);
      }
    }
    chain.push_back(std::move(pack));
  }

  // Stage 1b: intra-node all-to-all; local rank l receives what its node sends to local rank l.
  std::vector<size_t> mid_counts(static_cast<size_t>(L) * N);  // [l][n'] block sizes
  {
    std::vector<size_t> send(L, 0), recv(L, 0);
    for (int l = 0; l < L; ++l) {
      for (int n = 0; n < N; ++n) {
        send[l] += C(rank, R(n, l));
        mid_counts[static_cast<size_t>(l) * N + n] = C(R(n0, l), R(n, l0));
        recv[l] += mid_counts[static_cast<size_t>(l) * N + n];
      }
    }
    chain.push_back({ExchangeOrSelfCopy(AllToAllGroup::kIntraNode, send, recv), 1, 2});
  }

  // Stage 2a: transpose [l][n'] -> [n'][l], so each destination node's blocks are contiguous.
  {
    std::vector<size_t> dst_offset(mid_counts.size());
    size_t offset = 0;
    for (int n = 0; n < N; ++n) {
      for (int l = 0; l < L; ++l) {
        dst_offset[static_cast<size_t>(l) * N + n] = offset;
        offset += mid_counts[static_cast<size_t>(l) * N + n];
      }
    }
    ChainStep transpose = CopyStep(2, 3);
    size_t src_offset = 0;
    for (size_t i = 0; i < mid_counts.size(); ++i) {
      transpose.step.copies.push_back({src_offset, dst_offset[i], mid_counts[i]});
      src_offset += mid_counts[i];
    }
    chain.push_back(std::move(transpose));
  }

  // Stage 2b: inter-node all-to-all among the ranks with local rank l0.
  {
    std::vector<size_t> send(N, 0), recv(N, 0);
    for (int n = 0; n < N; ++n) {
      for (int l = 0; l < L; ++l) {
        send[n] += mid_counts[static_cast<size_t>(l) * N + n];
        recv[n] += C(R(n, l), rank);
      }
    }
    chain.push_back({ExchangeOrSelfCopy(AllToAllGroup::kInterNode, send, recv), 3, 4});
  }

  // Stage 3: redistribute [n][l] into source rank order.
  {
    ChainStep unpack = CopyStep(4, 5);
    size_t offset = 0;
    for (int n = 0; n < N; ++n) {
      for (int l = 0; l < L; ++l) {
        const int s = R(n, l);
        unpack.step.copies.push_back({offset, output_displs[s], C(s, rank)});
        offset += C(s, rank);
      }
    }
    chain.push_back(std::move(unpack));
  }

  const size_t mid_total = Sum(mid_counts);
  const std::vector<size_t> sizes = {Sum(input_counts), Sum(input_counts),  mid_total,
                                     mid_total,         Sum(output_counts), Sum(output_counts)};
  return FinishSchedule(std::move(chain), sizes);
}

}  // namespace sy::internal
