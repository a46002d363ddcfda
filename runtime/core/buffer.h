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

}  // namespace sy
