// Offline cache simulation over an access trace: the hit rate each policy would get with a cache
// of `capacity` experts, for comparing MoESys LFU, LRU and W-TinyLFU with Belady's optimum
// (storage/cache/belady.h).
//
// The simulated cache is the real cache's logic without data: demand fetching (every miss is
// admitted), a fixed capacity, OnStep at every step boundary of the trace. It is cold at the
// start; warmup_steps excludes the first steps from the counts (their accesses still fill it).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "storage/cache/access_trace.h"
#include "storage/cache/cache_policy.h"

namespace sy::storage {

struct SimResult {
  std::string policy;
  uint64_t capacity = 0;
  uint64_t accesses = 0;  // counted accesses (after warm-up)
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  double hit_rate() const { return accesses == 0 ? 0.0 : static_cast<double>(hits) / accesses; }
};

SimResult SimulatePolicy(CachePolicy& policy, const AccessTrace& trace, uint64_t capacity,
                         uint32_t warmup_steps = 0);

}  // namespace sy::storage
