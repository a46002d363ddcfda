// LruPolicy: evicts the least recently used evictable entry.
// Ownership and thread-safety: see storage/cache/cache_policy.h.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>

#include "storage/cache/cache_policy.h"

namespace sy::storage {

class LruPolicy : public CachePolicy {
 public:
  std::string name() const override { return "lru"; }
  void OnHit(uint64_t key) override;
  void OnInsert(uint64_t key) override;
  void OnErase(uint64_t key) override;
  std::optional<uint64_t> Evict(uint64_t incoming, const Evictable& evictable) override;

 private:
  std::list<uint64_t> order_;  // most recent first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where_;
};

}  // namespace sy::storage
