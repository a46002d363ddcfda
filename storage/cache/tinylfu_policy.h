// WTinyLfuPolicy: Window TinyLFU (Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient Cache
// Admission Policy", and Caffeine's W-TinyLFU).
//
//   window   a small LRU (1% of the capacity, at least 1) that every new key enters
//   main     a segmented LRU: probation (20%) and protected (80%); a probation hit promotes
//   sketch   a count-min sketch (4 rows, 4-bit saturating counters) of recent access frequency,
//            halved after 10 x capacity increments so it forgets
// When full, the window's LRU candidate competes with main's probation victim: the one the sketch
// says is more frequent stays. (No doorkeeper Bloom filter: the sketch alone.)
//
// Ownership and thread-safety: see storage/cache/cache_policy.h.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "storage/cache/cache_policy.h"

namespace sy::storage {

// Count-min sketch with 4-bit counters and periodic halving (the TinyLFU "reset").
class FrequencySketch {
 public:
  explicit FrequencySketch(size_t capacity);
  void Increment(uint64_t key);
  int Estimate(uint64_t key) const;

 private:
  size_t Index(uint64_t key, int row) const;

  std::vector<uint8_t> counters_;  // 4 rows of width_ counters
  size_t width_;
  uint64_t additions_ = 0;
  uint64_t sample_size_;
};

class WTinyLfuPolicy : public CachePolicy {
 public:
  explicit WTinyLfuPolicy(size_t capacity);

  std::string name() const override { return "w-tinylfu"; }
  void OnHit(uint64_t key) override;
  void OnInsert(uint64_t key) override;
  void OnErase(uint64_t key) override;
  std::optional<uint64_t> Evict(uint64_t incoming, const Evictable& evictable) override;

 private:
  enum Segment : uint8_t { kWindow = 0, kProbation = 1, kProtected = 2 };
  struct Where {
    Segment segment;
    std::list<uint64_t>::iterator it;
  };

  void MoveToFront(uint64_t key, Segment segment);
  // The least recently used evictable key of a segment.
  std::optional<uint64_t> LruEvictable(Segment segment, const Evictable& evictable) const;
  void Remove(uint64_t key);
  void BalanceWindow();
  void BalanceProtected();

  size_t window_capacity_;
  size_t protected_capacity_;
  std::list<uint64_t> lists_[3];  // most recent first
  std::unordered_map<uint64_t, Where> where_;
  FrequencySketch sketch_;
};

}  // namespace sy::storage
