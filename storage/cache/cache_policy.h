// CachePolicy: which resident expert an expert cache evicts. One interface for the real cache
// (storage/cache/expert_cache.h) and for the offline simulator (storage/cache/cache_sim.h), so the
// policy measured on traces is the one that runs.
//
// Implementations: MoESys LFU (MoESys Algorithm 2, storage/cache/lfu_policy.h), LRU
// (storage/cache/lru_policy.h), W-TinyLFU (storage/cache/tinylfu_policy.h). Belady's optimal policy
// needs the future, so it is only a simulator (storage/cache/belady.h).
//
// Keys are ExpertKey::Packed() values. The caller tells the policy about every access (OnHit /
// OnInsert), asks it for a victim when full (Evict), and marks step boundaries (OnStep).
//
// Ownership: plain objects; the caller owns them.
// Thread-safety: none. The cache calls its policy under its own mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/core/status.h"

namespace sy::storage {

class CachePolicy {
 public:
  using Evictable = std::function<bool(uint64_t key)>;

  virtual ~CachePolicy() = default;
  virtual std::string name() const = 0;

  // A resident key was accessed.
  virtual void OnHit(uint64_t key) = 0;
  // A key was admitted after a miss (the cache had room, or just evicted for it).
  virtual void OnInsert(uint64_t key) = 0;
  // A resident key left without Evict (its load failed, or the cache dropped it).
  virtual void OnErase(uint64_t key) = 0;
  // The cache is full and must admit `incoming`: choose a resident key for which evictable(key)
  // holds, forget it, and return it; nullopt when no resident key is evictable.
  virtual std::optional<uint64_t> Evict(uint64_t incoming, const Evictable& evictable) = 0;
  // A step (a training iteration, a decode step) ended.
  virtual void OnStep() {}
  // The current (decayed) access count of a resident key, for policies that count (MoESys LFU);
  // -1 when the key is not resident or the policy keeps no counts.
  virtual double Count(uint64_t key) const {
    (void)key;
    return -1.0;
  }
};

enum class PolicyKind : uint8_t { kMoESysLfu, kLru, kWTinyLfu };

std::string_view PolicyKindName(PolicyKind kind);
Result<PolicyKind> ParsePolicyKind(std::string_view name);  // "lfu", "lru", "wtinylfu"

// MoESys Algorithm 2 parameters.
// The defaults are the best of a sweep on the Zipf traces (benchmarks/storage-results.md): with a
// positive threshold, entries whose counts decay below it are never candidates, so stale experts
// linger and the cache shrinks when popularity drifts.
struct LfuOptions {
  // Only entries whose hit count is >= threshold are eviction candidates; among them the minimum
  // count goes (ties: most recently used, Note [LFU ties] in lfu_policy.h). When no evictable entry
  // reaches the threshold the minimum over all evictable entries goes, so a miss can always be
  // served. Default: 0 (every entry is a candidate).
  double threshold = 0.0;
  // Every `decay_every` steps all counts are multiplied by beta. Default: 0.5.
  double beta = 0.5;
  // Steps between decays (MoESys K); 0 never decays. Default: 25.
  int64_t decay_every = 25;
};

struct PolicyOptions {
  PolicyKind kind = PolicyKind::kMoESysLfu;  // Default: MoESys LFU.
  LfuOptions lfu;
};

std::unique_ptr<CachePolicy> MakeCachePolicy(const PolicyOptions& options, size_t capacity);

}  // namespace sy::storage
