// Shared all-to-all checks for the thread-based and the MPI tests: the flat all-to-all (and a
// closed-form expected layout) is the oracle for the hierarchical one, forward and reverse.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "parallel/topology.h"

namespace sy::testing {

enum class CountPattern {
  kRandom,     // uniform in [0, max], about a third of the entries zero
  kEmptyRank,  // random, but one rank sends and receives nothing
  kSkewed,     // most rows go to one hot destination; the rest get 0 or 1
  kAllZero,    // nothing moves at all
};

std::string CountPatternName(CountPattern pattern);

// A size x size matrix (counts[src * size + dst]), the same on every rank for the same seed.
std::vector<size_t> MakeCountMatrix(int size, CountPattern pattern, uint32_t seed,
                                    size_t max_count);

// Collective over topology.world(). Runs the flat and the hierarchical all-to-all on `counts`
// with elem_bytes-sized elements, checks both against the expected per-source layout, checks
// that the reverse of each returns the original send buffer, and that no call writes outside its
// buffers (guard bytes after send, recv and workspace).
void CheckAllToAllAgainstFlat(const Topology& topology, std::span<const size_t> counts,
                              size_t elem_bytes);

}  // namespace sy::testing
