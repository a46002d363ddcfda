// Private to parallel/: how an AllToAllPlan's schedule is built. all_to_all.cc builds the flat
// schedule; all_to_all_hierarchical.cc the hierarchical one (MoESys Fig. 8).
//
// A schedule is first written as a chain over logical buffers (0 = the input, `output` = the
// output, the rest intermediates), then FinishSchedule drops the copies that are identities,
// maps the intermediates onto the two workspace halves, and checks that the input is only ever
// read and the output only ever written, so the same steps run backwards for Reverse.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "parallel/all_to_all.h"

namespace sy::internal {

struct ChainStep {
  AllToAllStep step;  // src/dst are ignored; the logical ones below are used
  int src = 0;
  int dst = 0;
};

struct Schedule {
  std::vector<AllToAllStep> steps;
  size_t work0_bytes = 0;
  size_t work1_bytes = 0;
};

// `sizes[b]` is the byte size of logical buffer b; the chain must run 0 -> ... -> sizes.size()-1.
Schedule FinishSchedule(std::vector<ChainStep> chain, std::span<const size_t> sizes);

// The hierarchical chain for `rank`; counts in bytes, counts[src * size + dst]. Needs a uniform
// layout.
Schedule BuildHierarchicalSchedule(const NodeLayout& layout, int rank,
                                   std::span<const size_t> byte_counts);

}  // namespace sy::internal
