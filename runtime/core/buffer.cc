#include "runtime/core/buffer.h"

#include <cstdlib>
#include <string>

namespace sy {

Buffer::Buffer(void* data, size_t bytes, Device device, ReleaseFn release, bool pinned)
    : data_(data), bytes_(bytes), device_(device), release_(std::move(release)), pinned_(pinned) {}

Buffer::~Buffer() {
  if (release_) release_(data_, bytes_);
}

Result<std::shared_ptr<Buffer>> AllocateHostBuffer(size_t bytes) {
  size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  if (rounded == 0) rounded = kHostAlignment;
  void* data = std::aligned_alloc(kHostAlignment, rounded);
  if (data == nullptr) {
    return ResourceExhaustedError("host allocation of " + std::to_string(bytes) +
                                  " bytes failed: out of memory");
  }
  return std::make_shared<Buffer>(data, bytes, Device::Cpu(),
                                  [](void* p, size_t) { std::free(p); });
}

}  // namespace sy
