// Buffer: one allocation, which knows its device and how to free itself.
//
// Ownership: a Buffer owns its bytes and releases them through its release function on
// destruction (back to a caching allocator, cudaFree, free, ...). Tensors share a Buffer through
// std::shared_ptr, so memory lives as long as the last view of it.
// Thread-safety: immutable after construction; destruction must not race with use.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "runtime/core/device.h"

namespace sy {

class Buffer {
 public:
  using ReleaseFn = std::function<void(void* data, size_t bytes)>;

  // `pinned` marks page-locked host memory (fast asynchronous device copies).
  Buffer(void* data, size_t bytes, Device device, ReleaseFn release, bool pinned = false);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  const Device& device() const { return device_; }
  bool pinned() const { return pinned_; }

 private:
  void* data_;
  size_t bytes_;
  Device device_;
  ReleaseFn release_;
  bool pinned_;
};

// Host memory aligned to kHostAlignment (so AVX loads and O_DIRECT I/O both work), freed on
// destruction. Aborts on out-of-memory only through the caller's SY_CHECK of the Result.
inline constexpr size_t kHostAlignment = 4096;
Result<std::shared_ptr<Buffer>> AllocateHostBuffer(size_t bytes);

// The host allocation every CPU-side buffer uses: `bytes` rounded up to kHostAlignment, aligned to
// it; a block of kHugePageBytes or more is aligned to kHugePageBytes and advised
// MADV_HUGEPAGE, so weights that a decode step streams through (and the STREAM-like bench that
// measures the machine) walk 2 MiB pages, not 4 KiB ones, where transparent huge pages are in
// `madvise` mode (Debian's default; as PyTorch's THP_MEM_ALLOC_ENABLE). Null when out of memory.
// Free with std::free.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;
void* AllocateHostMemory(size_t bytes);

}  // namespace sy
