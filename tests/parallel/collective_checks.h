// Conformance checks every host-memory Communicator must pass (local, thread, mpi). Every rank of
// `comm` calls them together. Values depend on the sending rank, the receiving rank and the
// position, so misrouted, misplaced or stale data fails; sentinels around the receive regions
// catch writes outside them. Failures are gtest EXPECTs on the rank that sees them.
#pragma once

#include "parallel/communicator.h"
#include "parallel/topology.h"

namespace sy::testing {

// A stream for the *Async calls of host communicators, which run synchronously.
class HostTestStream final : public Stream {};

// Barrier, Broadcast, AllReduce (every type and op, in and out of place), AllGather, AllGatherV,
// ReduceScatter, AllToAll, AllToAllV, and their Async forms.
void CheckCollectives(Communicator& comm);

// Send/Recv around a ring (each rank sends to rank+1 and receives from rank-1), twice with
// different tags received in reverse order.
void CheckSendRecvRing(Communicator& comm);

// Split into even and odd ranks (and one rank opting out when size() > 2), then checks the new
// communicators' ranks, sizes and an AllReduce on each.
void CheckSplit(Communicator& comm);

// The intra-node and inter-node communicators of `topology` hold exactly the ranks its layout
// says, in local-rank and node order (checked with an AllReduce of world ranks on each).
void CheckTopologyCommunicators(const Topology& topology);

}  // namespace sy::testing
