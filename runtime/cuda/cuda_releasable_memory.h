// CudaReleasableMemory: device memory whose physical backing can be dropped and restored at the
// same address (Backend::AllocateReleasable / ReleaseBacking / RestoreBacking on cuda), for
// ZeRO-3's full copies of the dense parameters (parallel/zero3.h), which layers keep views of.
//
// CUDA's virtual memory management: each allocation reserves an address range
// (cuMemAddressReserve), rounded up to the device's allocation granularity (2 MiB on current
// GPUs), and maps a physical allocation into it (cuMemCreate, cuMemMap, cuMemSetAccess); Release
// unmaps and frees the physical allocation, Restore creates and maps a new one. The driver
// functions are looked up through the runtime (cudaGetDriverEntryPointByVersion), so nothing links
// libcuda and a build without a GPU runs as before. PyTorch's expandable segments use the same
// calls.
//
// Private to runtime/cuda (includes the CUDA headers).
// Ownership: the buffers Allocate returns unmap and free their range when the last view goes;
// they must not outlive this object (the backend owns it and outlives its tensors).
// Thread-safety: every member function is thread-safe.
#pragma once

#include <cstddef>
#include <map>
#include <memory>

#include "runtime/core/buffer.h"
#include "runtime/core/mutex.h"
#include "runtime/core/status.h"

namespace sy {

class CudaReleasableMemory {
 public:
  // For GPU `device`. Unavailable when the driver lacks virtual memory management.
  static Result<std::unique_ptr<CudaReleasableMemory>> Create(int device);
  ~CudaReleasableMemory();
  CudaReleasableMemory(const CudaReleasableMemory&) = delete;
  CudaReleasableMemory& operator=(const CudaReleasableMemory&) = delete;

  // A mapped range of at least `bytes` (one granule for 0). ResourceExhausted when the device
  // has no memory left.
  Result<std::shared_ptr<Buffer>> Allocate(size_t bytes);
  // Whether `buffer` is one of Allocate's.
  bool Owns(const Buffer& buffer) const;
  // Unmaps and frees the physical memory behind `buffer` (nothing when it holds none). The caller
  // synchronised every stream that used it.
  void Release(const Buffer& buffer);
  // Maps fresh physical memory behind `buffer` (nothing when it holds some).
  Status Restore(const Buffer& buffer);
  // Physical bytes mapped now, and at most since creation.
  size_t mapped_bytes() const;
  size_t peak_mapped_bytes() const;

 private:
  struct Range {
    size_t bytes = 0;               // reserved, a multiple of the granularity
    unsigned long long handle = 0;  // CUmemGenericAllocationHandle; 0: unmapped
  };
  explicit CudaReleasableMemory(int device, size_t granularity);
  Status Map(void* data, Range& range) SY_REQUIRES(mutex_);
  void Unmap(void* data, Range& range) SY_REQUIRES(mutex_);
  void Free(void* data);

  const int device_;
  const size_t granularity_;
  mutable Mutex mutex_;
  std::map<void*, Range> ranges_ SY_GUARDED_BY(mutex_);
  size_t mapped_ SY_GUARDED_BY(mutex_) = 0;
  size_t peak_mapped_ SY_GUARDED_BY(mutex_) = 0;
};

}  // namespace sy
