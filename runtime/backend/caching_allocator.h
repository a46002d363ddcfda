// CachingAllocator: keeps freed device blocks for reuse, as PyTorch's CUDA caching allocator does,
// so steady-state training and decoding allocate nothing from the device.
//
// Sizes are rounded up to 512 bytes. A request reuses the smallest cached block that is at least
// as large and at most twice as large; otherwise it asks the device. When the device is out of
// memory, every cached block is returned and the request is retried once before it fails with
// ResourceExhausted (a Status, never an abort).
//
// Ownership: returned Buffers hand their block back to this allocator, which must outlive them.
// Blocks are reused without stream tracking: a block freed while a stream still uses it must not be
// freed until that stream is synchronized (all backends here order frees after their compute).
// Thread-safety: all methods are thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>

#include "runtime/backend/backend.h"
#include "runtime/core/buffer.h"
#include "runtime/core/mutex.h"

namespace sy {

class CachingAllocator {
 public:
  // Raw device allocation: returns nullptr when the device is out of memory.
  using RawAllocateFn = std::function<void*(size_t bytes)>;
  using RawFreeFn = std::function<void(void* data, size_t bytes)>;

  CachingAllocator(Device device, RawAllocateFn allocate, RawFreeFn free, size_t limit_bytes);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  Result<std::shared_ptr<Buffer>> Allocate(size_t bytes) SY_EXCLUDES(mutex_);
  void EmptyCache() SY_EXCLUDES(mutex_);
  MemoryStats stats() const SY_EXCLUDES(mutex_);
  void ResetPeak() SY_EXCLUDES(mutex_);

 private:
  void Release(void* data, size_t rounded_bytes) SY_EXCLUDES(mutex_);
  void EmptyCacheLocked() SY_REQUIRES(mutex_);

  Device device_;
  RawAllocateFn raw_allocate_;
  RawFreeFn raw_free_;
  mutable Mutex mutex_;
  std::multimap<size_t, void*> cached_ SY_GUARDED_BY(mutex_);  // rounded size -> block
  MemoryStats stats_ SY_GUARDED_BY(mutex_);
  std::shared_ptr<bool> alive_;  // lets late Buffer releases see a destroyed allocator
};

}  // namespace sy
