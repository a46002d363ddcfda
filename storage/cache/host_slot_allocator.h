// HostSlotAllocator: where an expert cache gets its host memory, once, at construction.
//
// Note [pinned slots]: MoESys keeps hot expert states in pinned (page-locked) host memory so the
// next hop to the device is a fast asynchronous copy. This machine's tests have no CUDA, so the
// default allocator returns 4 KiB-aligned host memory from AllocateHostBuffer (aligned for
// O_DIRECT, not page-locked). A CUDA build plugs in an allocator that uses cudaHostAlloc (or
// cudaHostRegister) and marks the Buffer pinned; nothing else in the cache changes.
//
// Ownership: Allocate returns a Buffer that owns its memory and frees it through its release
// function; the allocator may be destroyed before the buffers it made.
// Thread-safety: implementations must allow concurrent Allocate calls.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "runtime/core/buffer.h"

namespace sy::storage {

class HostSlotAllocator {
 public:
  virtual ~HostSlotAllocator() = default;
  virtual std::string name() const = 0;
  // `bytes` of host memory aligned to 4096.
  virtual Result<std::shared_ptr<Buffer>> Allocate(size_t bytes) = 0;
};

// AllocateHostBuffer: aligned, pageable host memory.
class AlignedHostSlotAllocator : public HostSlotAllocator {
 public:
  std::string name() const override { return "aligned-host"; }
  Result<std::shared_ptr<Buffer>> Allocate(size_t bytes) override;
};

// The allocator used when a cache is given none.
HostSlotAllocator* DefaultHostSlotAllocator();

}  // namespace sy::storage
