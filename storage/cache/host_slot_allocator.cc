#include "storage/cache/host_slot_allocator.h"

namespace sy::storage {

Result<std::shared_ptr<Buffer>> AlignedHostSlotAllocator::Allocate(size_t bytes) {
  return AllocateHostBuffer(bytes);
}

HostSlotAllocator* DefaultHostSlotAllocator() {
  static AlignedHostSlotAllocator allocator;
  return &allocator;
}

}  // namespace sy::storage
