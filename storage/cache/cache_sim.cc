#include "storage/cache/cache_sim.h"

#include <unordered_set>

#include "runtime/core/check.h"
#include "storage/store/expert_key.h"

namespace sy::storage {

SimResult SimulatePolicy(CachePolicy& policy, const AccessTrace& trace, uint64_t capacity,
                         uint32_t warmup_steps) {
  SY_CHECK_GT(capacity, 0u);
  SimResult result;
  result.policy = policy.name();
  result.capacity = capacity;
  std::unordered_set<uint64_t> resident;
  auto always = [](uint64_t) { return true; };
  for (size_t i = 0; i < trace.accesses.size(); ++i) {
    const Access& access = trace.accesses[i];
    if (i > 0 && access.step != trace.accesses[i - 1].step) policy.OnStep();
    uint64_t key = ExpertKey{access.layer, access.expert}.Packed();
    bool counted = access.step >= warmup_steps;
    if (resident.count(key) > 0) {
      policy.OnHit(key);
      if (counted) ++result.hits;
    } else {
      if (resident.size() >= capacity) {
        std::optional<uint64_t> victim = policy.Evict(key, always);
        SY_CHECK(victim.has_value()) << policy.name() << " found no victim in a full cache";
        SY_CHECK(resident.erase(*victim) == 1) << policy.name() << " evicted a non-resident key";
        if (counted) ++result.evictions;
      }
      resident.insert(key);
      policy.OnInsert(key);
      if (counted) ++result.misses;
    }
    if (counted) ++result.accesses;
  }
  return result;
}

}  // namespace sy::storage
