#include "storage/cache/belady.h"

#include <limits>
#include <queue>
#include <unordered_map>
#include <vector>

#include "runtime/core/check.h"
#include "storage/store/expert_key.h"

namespace sy::storage {

SimResult SimulateBelady(const AccessTrace& trace, uint64_t capacity, uint32_t warmup_steps) {
  SY_CHECK_GT(capacity, 0u);
  const size_t n = trace.accesses.size();
  constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  std::vector<uint64_t> keys(n);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = ExpertKey{trace.accesses[i].layer, trace.accesses[i].expert}.Packed();
  }
  // next_use[i]: the position of the next access to keys[i] after i.
  std::vector<uint64_t> next_use(n, kNever);
  std::unordered_map<uint64_t, uint64_t> seen;
  for (size_t i = n; i-- > 0;) {
    auto it = seen.find(keys[i]);
    if (it != seen.end()) next_use[i] = it->second;
    seen[keys[i]] = i;
  }
  SimResult result;
  result.policy = "belady";
  result.capacity = capacity;
  // Resident key -> its next use; a max-heap of (next use, key) with lazy deletion.
  std::unordered_map<uint64_t, uint64_t> resident;
  std::priority_queue<std::pair<uint64_t, uint64_t>> heap;
  for (size_t i = 0; i < n; ++i) {
    bool counted = trace.accesses[i].step >= warmup_steps;
    uint64_t key = keys[i];
    auto it = resident.find(key);
    if (it != resident.end()) {
      it->second = next_use[i];
      heap.emplace(next_use[i], key);
      if (counted) ++result.hits;
    } else {
      if (resident.size() >= capacity) {
        for (;;) {
          auto [use, victim] = heap.top();
          heap.pop();
          auto r = resident.find(victim);
          if (r != resident.end() && r->second == use) {
            resident.erase(r);
            break;
          }
        }
        if (counted) ++result.evictions;
      }
      resident[key] = next_use[i];
      heap.emplace(next_use[i], key);
      if (counted) ++result.misses;
    }
    if (counted) ++result.accesses;
  }
  return result;
}

}  // namespace sy::storage
