#include "runtime/backend/caching_allocator.h"

#include <algorithm>
#include <string>

#include "runtime/core/check.h"

namespace sy {
namespace {
constexpr size_t kRounding = 512;
size_t RoundUp(size_t bytes) {
  return std::max(kRounding, (bytes + kRounding - 1) / kRounding * kRounding);
}
}  // namespace

CachingAllocator::CachingAllocator(Device device, RawAllocateFn allocate, RawFreeFn free,
                                   size_t limit_bytes)
    : device_(device),
      raw_allocate_(std::move(allocate)),
      raw_free_(std::move(free)),
      alive_(std::make_shared<bool>(true)) {
  stats_.limit = limit_bytes;
}

CachingAllocator::~CachingAllocator() {
  MutexLock lock(&mutex_);
  SY_CHECK_EQ(stats_.bytes_in_use, size_t{0})
      << "CachingAllocator for " << device_.ToString() << " destroyed with live buffers";
  EmptyCacheLocked();
  *alive_ = false;
}

Result<std::shared_ptr<Buffer>> CachingAllocator::Allocate(size_t bytes) {
  size_t rounded = RoundUp(bytes);
  void* block = nullptr;
  {
    MutexLock lock(&mutex_);
    ++stats_.num_allocs;
    auto it = cached_.lower_bound(rounded);
    if (it != cached_.end() && it->first <= 2 * rounded) {
      rounded = it->first;
      block = it->second;
      cached_.erase(it);
    } else {
      block = raw_allocate_(rounded);
      if (block == nullptr) {
        EmptyCacheLocked();
        block = raw_allocate_(rounded);
      }
      if (block == nullptr) {
        return ResourceExhaustedError(
            device_.ToString() + " out of memory allocating " + std::to_string(bytes) +
            " bytes (in use " + std::to_string(stats_.bytes_in_use) + ", limit " +
            std::to_string(stats_.limit) + "): lower the batch size or the device budget");
      }
      ++stats_.num_device_allocs;
      stats_.bytes_reserved += rounded;
    }
    stats_.bytes_in_use += rounded;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  }
  std::weak_ptr<bool> alive = alive_;
  return std::make_shared<Buffer>(
      block, bytes, device_, [this, rounded, alive](void* data, size_t) {
        auto still = alive.lock();
        SY_CHECK(still && *still) << "device buffer outlived its allocator";
        Release(data, rounded);
      });
}

void CachingAllocator::Release(void* data, size_t rounded_bytes) {
  MutexLock lock(&mutex_);
  stats_.bytes_in_use -= rounded_bytes;
  cached_.emplace(rounded_bytes, data);
}

void CachingAllocator::EmptyCache() {
  MutexLock lock(&mutex_);
  EmptyCacheLocked();
}

void CachingAllocator::EmptyCacheLocked() {
  for (auto& [size, block] : cached_) {
    raw_free_(block, size);
    stats_.bytes_reserved -= size;
  }
  cached_.clear();
}

MemoryStats CachingAllocator::stats() const {
  MutexLock lock(&mutex_);
  return stats_;
}

void CachingAllocator::ResetPeak() {
  MutexLock lock(&mutex_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

}  // namespace sy
