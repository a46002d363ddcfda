#include "storage/cache/lfu_policy.h"

#include "runtime/core/check.h"

namespace sy::storage {

MoESysLfuPolicy::MoESysLfuPolicy(const LfuOptions& options) : options_(options) {}

void MoESysLfuPolicy::OnHit(uint64_t key) {
  auto it = entries_.find(key);
  SY_CHECK(it != entries_.end()) << "LFU hit on non-resident key " << key;
  it->second.count += 1;
  it->second.last_use = ++clock_;
}

void MoESysLfuPolicy::OnInsert(uint64_t key) {
  auto [it, inserted] = entries_.emplace(key, Entry{});
  SY_CHECK(inserted) << "LFU insert of resident key " << key;
  it->second.count = 1;
  it->second.last_use = ++clock_;
}

void MoESysLfuPolicy::OnErase(uint64_t key) { entries_.erase(key); }

std::optional<uint64_t> MoESysLfuPolicy::Evict(uint64_t incoming, const Evictable& evictable) {
  const Entry* best = nullptr;  // minimum among count >= threshold
  uint64_t best_key = 0;
  const Entry* fallback = nullptr;  // minimum among all evictable
  uint64_t fallback_key = 0;
  // Note [LFU ties] in lfu_policy.h: among equal counts the most recently used goes.
  auto less = [](const Entry& a, const Entry& b) {
    return a.count < b.count || (a.count == b.count && a.last_use > b.last_use);
  };
  for (const auto& [key, entry] : entries_) {
    if (!evictable(key)) continue;
    if (fallback == nullptr || less(entry, *fallback)) {
      fallback = &entry;
      fallback_key = key;
    }
    if (entry.count >= options_.threshold && (best == nullptr || less(entry, *best))) {
      best = &entry;
      best_key = key;
    }
  }
  if (fallback == nullptr) return std::nullopt;
  uint64_t victim = best != nullptr ? best_key : fallback_key;
  entries_.erase(victim);
  return victim;
}

void MoESysLfuPolicy::OnStep() {
  if (options_.decay_every <= 0) return;
  if (++steps_ < options_.decay_every) return;
  steps_ = 0;
  for (auto& [key, entry] : entries_) entry.count *= options_.beta;
}

double MoESysLfuPolicy::Count(uint64_t key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? -1.0 : it->second.count;
}

}  // namespace sy::storage
