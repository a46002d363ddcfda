#include "storage/cache/tinylfu_policy.h"

#include <algorithm>
#include <bit>

#include "runtime/core/check.h"

namespace sy::storage {
namespace {

uint64_t Mix(uint64_t x, uint64_t seed) {
  x ^= seed;
  x = (x ^ (x >> 33)) * 0xFF51AFD7ED558CCDull;
  x = (x ^ (x >> 33)) * 0xC4CEB9FE1A85EC53ull;
  return x ^ (x >> 33);
}

constexpr uint64_t kSeeds[4] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull,
                                0x27D4EB2F165667C5ull};

}  // namespace

FrequencySketch::FrequencySketch(size_t capacity)
    : width_(std::bit_ceil(std::max<size_t>(16, capacity * 4))),
      sample_size_(std::max<uint64_t>(10, 10 * capacity)) {
  counters_.assign(4 * width_, 0);
}

size_t FrequencySketch::Index(uint64_t key, int row) const {
  return static_cast<size_t>(row) * width_ + (Mix(key, kSeeds[row]) & (width_ - 1));
}

void FrequencySketch::Increment(uint64_t key) {
  for (int row = 0; row < 4; ++row) {
    uint8_t& c = counters_[Index(key, row)];
    if (c < 15) ++c;
  }
  if (++additions_ >= sample_size_) {
    for (uint8_t& c : counters_) c = static_cast<uint8_t>(c / 2);
    additions_ /= 2;
  }
}

int FrequencySketch::Estimate(uint64_t key) const {
  int best = 15;
  for (int row = 0; row < 4; ++row) best = std::min<int>(best, counters_[Index(key, row)]);
  return best;
}

WTinyLfuPolicy::WTinyLfuPolicy(size_t capacity)
    : window_capacity_(std::max<size_t>(1, capacity / 100)),
      protected_capacity_((capacity - std::min(capacity, std::max<size_t>(1, capacity / 100))) * 8 /
                          10),
      sketch_(capacity) {}

void WTinyLfuPolicy::MoveToFront(uint64_t key, Segment segment) {
  auto found = where_.find(key);
  if (found != where_.end()) {
    lists_[found->second.segment].erase(found->second.it);
  }
  lists_[segment].push_front(key);
  where_[key] = Where{segment, lists_[segment].begin()};
}

void WTinyLfuPolicy::Remove(uint64_t key) {
  auto found = where_.find(key);
  if (found == where_.end()) return;
  lists_[found->second.segment].erase(found->second.it);
  where_.erase(found);
}

std::optional<uint64_t> WTinyLfuPolicy::LruEvictable(Segment segment,
                                                     const Evictable& evictable) const {
  for (auto it = lists_[segment].rbegin(); it != lists_[segment].rend(); ++it) {
    if (evictable(*it)) return *it;
  }
  return std::nullopt;
}

void WTinyLfuPolicy::BalanceWindow() {
  while (lists_[kWindow].size() > window_capacity_) {
    MoveToFront(lists_[kWindow].back(), kProbation);
  }
}

void WTinyLfuPolicy::BalanceProtected() {
  while (lists_[kProtected].size() > protected_capacity_) {
    MoveToFront(lists_[kProtected].back(), kProbation);
  }
}

void WTinyLfuPolicy::OnHit(uint64_t key) {
  auto found = where_.find(key);
  SY_CHECK(found != where_.end()) << "W-TinyLFU hit on non-resident key " << key;
  sketch_.Increment(key);
  switch (found->second.segment) {
    case kWindow:
      MoveToFront(key, kWindow);
      break;
    case kProbation:
      MoveToFront(key, kProtected);
      BalanceProtected();
      break;
    case kProtected:
      MoveToFront(key, kProtected);
      break;
  }
}

void WTinyLfuPolicy::OnInsert(uint64_t key) {
  SY_CHECK(where_.count(key) == 0) << "W-TinyLFU insert of resident key " << key;
  sketch_.Increment(key);
  MoveToFront(key, kWindow);
  BalanceWindow();
}

void WTinyLfuPolicy::OnErase(uint64_t key) { Remove(key); }

std::optional<uint64_t> WTinyLfuPolicy::Evict(uint64_t incoming, const Evictable& evictable) {
  std::optional<uint64_t> victim = LruEvictable(kProbation, evictable);
  if (!victim) victim = LruEvictable(kProtected, evictable);
  if (lists_[kWindow].size() >= window_capacity_) {
    // The window is full: its LRU candidate must either enter main or leave.
    std::optional<uint64_t> candidate = LruEvictable(kWindow, evictable);
    if (candidate && victim) {
      if (sketch_.Estimate(*candidate) > sketch_.Estimate(*victim)) {
        Remove(*victim);
        MoveToFront(*candidate, kProbation);
        return victim;
      }
      Remove(*candidate);
      return candidate;
    }
    if (candidate) {
      Remove(*candidate);
      return candidate;
    }
  }
  if (!victim) victim = LruEvictable(kWindow, evictable);
  if (victim) Remove(*victim);
  return victim;
}

}  // namespace sy::storage
