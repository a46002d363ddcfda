// MoESysLfuPolicy: the LFU CPU cache policy of MoESys (SE-MoE) Algorithm 2.
//
//   hit            hits[p] += 1
//   miss, room     hits[p] = 1
//   miss, full     evict the entry whose count is the minimum among those >= threshold
//                  (ties: most recently used); if none reaches the threshold, the minimum of all
//
// Note [LFU ties]. Algorithm 2 does not say which of several minimal entries goes. Breaking ties
// by least recent use makes a scan over more experts than slots (MoE training that activates
// every expert each step, layer after layer) evict each entry just before its next use: no hit
// at all. Breaking them by most recent use keeps the incumbents and lets the newcomer go, so a
// stable set stays resident and earns its hits (on a cyclic scan of n keys through c slots,
// c - 1 hits per pass, as Belady); the decay still ages incumbents that stop being used (their
// counts fall below a newcomer's 1).
//   every K steps  every count *= beta
//
// Evict scans the resident entries (O(capacity)); caches hold hundreds to a few thousand experts.
//
// Ownership and thread-safety: see storage/cache/cache_policy.h.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "storage/cache/cache_policy.h"

namespace sy::storage {

class MoESysLfuPolicy : public CachePolicy {
 public:
  explicit MoESysLfuPolicy(const LfuOptions& options);

  std::string name() const override { return "moesys-lfu"; }
  void OnHit(uint64_t key) override;
  void OnInsert(uint64_t key) override;
  void OnErase(uint64_t key) override;
  std::optional<uint64_t> Evict(uint64_t incoming, const Evictable& evictable) override;
  void OnStep() override;

  double Count(uint64_t key) const override;

 private:
  struct Entry {
    double count = 0;
    uint64_t last_use = 0;
  };

  LfuOptions options_;
  std::unordered_map<uint64_t, Entry> entries_;
  uint64_t clock_ = 0;
  int64_t steps_ = 0;
};

}  // namespace sy::storage
