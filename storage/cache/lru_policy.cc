#include "storage/cache/lru_policy.h"

#include "runtime/core/check.h"

namespace sy::storage {

void LruPolicy::OnHit(uint64_t key) {
  auto it = where_.find(key);
  SY_CHECK(it != where_.end()) << "LRU hit on non-resident key " << key;
  order_.splice(order_.begin(), order_, it->second);
}

void LruPolicy::OnInsert(uint64_t key) {
  SY_CHECK(where_.count(key) == 0) << "LRU insert of resident key " << key;
  order_.push_front(key);
  where_[key] = order_.begin();
}

void LruPolicy::OnErase(uint64_t key) {
  auto it = where_.find(key);
  if (it == where_.end()) return;
  order_.erase(it->second);
  where_.erase(it);
}

std::optional<uint64_t> LruPolicy::Evict(uint64_t incoming, const Evictable& evictable) {
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
    if (!evictable(*it)) continue;
    uint64_t victim = *it;
    OnErase(victim);
    return victim;
  }
  return std::nullopt;
}

}  // namespace sy::storage
