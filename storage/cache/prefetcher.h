// Prefetcher: brings experts into an ExpertCache ahead of use, and optionally one hop further.
//
//   Prefetch(layer, experts, priority)  queues the experts; worker threads start their fetches,
//                                       high priority before low, first come first served within
//                                       a priority (storage/cache/two_priority_queue.h). An
//                                       expert already queued is not queued twice; a HIGH request
//                                       for one queued LOW promotes it. Never blocks the caller.
//   Acquire(layer, expert)              returns the pinned entry, waiting only if it has not
//                                       landed yet (fetching it now if no prefetch asked for it).
//
// Next hop. When PrefetcherOptions::next_hop is set, every prefetched expert, once it lands in
// its host slot, is pinned and handed to NextHop::OnHostReady, which takes it further: for a
// device cache, an asynchronous host-to-device copy on a copy stream, releasing the handle when
// the copy's event completes (runtime/backend/backend.h: CopyAsync + RecordEvent). The handle
// keeps the host slot from being evicted or rewritten until the copy no longer needs it.
//
// Ownership: borrows the cache and the next hop; both must outlive the prefetcher. The
// destructor drops queued requests and waits for the ones being worked on.
// Thread-safety: every method may be called from any thread. OnHostReady runs on a prefetcher
// worker thread.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <thread>
#include <variant>
#include <vector>

#include "runtime/core/mutex.h"
#include "storage/cache/expert_cache.h"
#include "storage/cache/two_priority_queue.h"
#include "storage/store/expert_key.h"

namespace sy::storage {

using PrefetchPriority = QueuePriority;

// The hop after the host slot (e.g. host -> device on a copy stream).
class NextHop {
 public:
  virtual ~NextHop() = default;
  // `handle` pins the landed expert (read mode). Keep it until the hop's copy has finished with
  // the slot, then drop it (from any thread). Must not block for long: it runs on a worker.
  virtual void OnHostReady(CacheHandle handle) = 0;
  // `key`'s fetch was dropped (no slot it may evict, or an error): it will not arrive.
  virtual void OnDropped(ExpertKey key) { (void)key; }
};

struct PrefetcherOptions {
  int threads = 2;              // worker threads. Default: 2.
  NextHop* next_hop = nullptr;  // Default: none (stop at the host slot).
  // Fetches evict only entries whose policy count is at most this (ExpertCache::Prefetch's
  // max_victim_count), or are dropped (NextHop::OnDropped): a fetch ahead of need never displaces
  // an entry used more than the newcomer it brings. Default: infinity (any entry the policy
  // picks).
  double max_victim_count = std::numeric_limits<double>::infinity();
};

struct PrefetcherStats {
  uint64_t requested = 0;         // experts passed to Prefetch (after de-duplication)
  uint64_t promoted = 0;          // queued LOW experts asked for again at HIGH
  uint64_t started = 0;           // fetches started by a prefetch
  uint64_t already_resident = 0;  // nothing to do: resident or on its way
  uint64_t dropped = 0;           // no evictable slot, or an error
  uint64_t handed_on = 0;         // passed to the next hop
  // Next hop: fetches whose store read failed (logged; the entry is read again, and its error
  // reported, when it is acquired).
  uint64_t failed = 0;
};

class Prefetcher {
 public:
  Prefetcher(ExpertCache* cache, const PrefetcherOptions& options = {});
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  void Prefetch(uint32_t layer, std::span<const uint32_t> experts, PrefetchPriority priority)
      SY_EXCLUDES(mutex_);
  Result<CacheHandle> Acquire(uint32_t layer, uint32_t expert, AccessMode mode = AccessMode::kRead);
  // Waits until every request queued so far has been worked on (not for the data to land).
  void Drain() SY_EXCLUDES(mutex_);
  PrefetcherStats stats() const SY_EXCLUDES(mutex_);

 private:
  void WorkLoop() SY_EXCLUDES(mutex_);

  ExpertCache* cache_;
  PrefetcherOptions options_;
  mutable Mutex mutex_;
  CondVar cv_;
  TwoPriorityQueue<ExpertKey, std::monostate, ExpertKeyHash> queue_ SY_GUARDED_BY(mutex_);
  int active_ SY_GUARDED_BY(mutex_) = 0;
  bool stopping_ SY_GUARDED_BY(mutex_) = false;
  PrefetcherStats stats_ SY_GUARDED_BY(mutex_);
  std::vector<std::thread> workers_;
};

}  // namespace sy::storage
