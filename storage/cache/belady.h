// Belady's MIN: the optimal replacement for a demand-fetching cache (every miss is admitted),
// computed offline from the whole trace: when full, evict the resident key whose next use is
// farthest in the future (or never comes). No online policy can hit more often, so it is the
// yardstick for the policies in storage/cache/cache_policy.h.
//
// Thread-safety: pure function. O(n log capacity) time.
#pragma once

#include <cstdint>

#include "storage/cache/access_trace.h"
#include "storage/cache/cache_sim.h"

namespace sy::storage {

SimResult SimulateBelady(const AccessTrace& trace, uint64_t capacity, uint32_t warmup_steps = 0);

}  // namespace sy::storage
