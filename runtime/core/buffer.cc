#include "runtime/core/buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace sy {

Buffer::Buffer(void* data, size_t bytes, Device device, ReleaseFn release, bool pinned)
    : data_(data), bytes_(bytes), device_(device), release_(std::move(release)), pinned_(pinned) {}

Buffer::~Buffer() {
  if (release_) release_(data_, bytes_);
}

void* AllocateHostMemory(size_t bytes) {
  if (bytes < kHugePageBytes) {
    const size_t rounded =
        std::max(kHostAlignment, (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment);
    return std::aligned_alloc(kHostAlignment, rounded);
  }
  const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* data = std::aligned_alloc(kHugePageBytes, rounded);
  // Advice only: without THP (or with it off) the pages stay 4 KiB and nothing else changes.
  if (data != nullptr) (void)madvise(data, rounded, MADV_HUGEPAGE);
  return data;
}

Result<std::shared_ptr<Buffer>> AllocateHostBuffer(size_t bytes) {
  void* data = AllocateHostMemory(bytes);
  if (data == nullptr) {
    return ResourceExhaustedError("host allocation of " + std::to_string(bytes) +
                                  " bytes failed: out of memory");
  }
  return std::make_shared<Buffer>(data, bytes, Device::Cpu(),
                                  [](void* p, size_t) { std::free(p); });
}

}  // namespace sy
