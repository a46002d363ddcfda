#include "storage/cache/prefetcher.h"

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

namespace sy::storage {

Prefetcher::Prefetcher(ExpertCache* cache, const PrefetcherOptions& options)
    : cache_(cache), options_(options) {
  int threads = std::max(1, options_.threads);
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { WorkLoop(); });
}

Prefetcher::~Prefetcher() {
  {
    MutexLock lock(&mutex_);
    stopping_ = true;
    queue_.Clear();
  }
  cv_.NotifyAll();
  for (std::thread& worker : workers_) worker.join();
}

void Prefetcher::Prefetch(uint32_t layer, std::span<const uint32_t> experts,
                          PrefetchPriority priority) {
  {
    MutexLock lock(&mutex_);
    for (uint32_t expert : experts) {
      switch (queue_.Push(priority, ExpertKey{layer, expert})) {
        case decltype(queue_)::PushResult::kQueued:
          ++stats_.requested;
          break;
        case decltype(queue_)::PushResult::kPromoted:
          ++stats_.promoted;
          break;
        case decltype(queue_)::PushResult::kAlreadyQueued:
          break;
      }
    }
  }
  cv_.NotifyAll();
}

Result<CacheHandle> Prefetcher::Acquire(uint32_t layer, uint32_t expert, AccessMode mode) {
  return cache_->Acquire(ExpertKey{layer, expert}, mode);
}

void Prefetcher::Drain() {
  MutexLock lock(&mutex_);
  while (!queue_.empty() || active_ != 0) cv_.Wait(&mutex_);
}

PrefetcherStats Prefetcher::stats() const {
  MutexLock lock(&mutex_);
  return stats_;
}

void Prefetcher::WorkLoop() {
  MutexLock lock(&mutex_);
  for (;;) {
    while (!stopping_ && queue_.empty()) cv_.Wait(&mutex_);
    if (stopping_) return;
    const ExpertKey key = queue_.Pop()->key;
    ++active_;
    lock.Unlock();

    Result<bool> started = cache_->Prefetch(key, options_.max_victim_count);
    if (!started.ok() && options_.next_hop != nullptr) options_.next_hop->OnDropped(key);
    bool handed_on = false, failed = false;
    if (started.ok() && options_.next_hop != nullptr) {
      Result<CacheHandle> handle = cache_->PinResident(key);
      if (handle.ok()) {
        options_.next_hop->OnHostReady(std::move(*handle));
        handed_on = true;
      } else if (handle.status().code() == StatusCode::kNotFound) {
        // Evicted again before it could be pinned: nothing failed.
        spdlog::debug("prefetch of {}: not handed on: {}", key.ToString(),
                      handle.status().message());
      } else {
        failed = true;
        spdlog::warn("prefetch of {} failed ({}); it is read again when it is used", key.ToString(),
                     handle.status().message());
      }
    }

    lock.Lock();
    --active_;
    if (!started.ok()) {
      ++stats_.dropped;
    } else if (*started) {
      ++stats_.started;
    } else {
      ++stats_.already_resident;
    }
    if (handed_on) ++stats_.handed_on;
    if (failed) ++stats_.failed;
    cv_.NotifyAll();
  }
}

}  // namespace sy::storage
