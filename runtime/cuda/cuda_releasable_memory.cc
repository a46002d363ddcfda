#include "runtime/cuda/cuda_releasable_memory.h"

#include <cuda.h>

#include <algorithm>
#include <string>

#include "runtime/core/check.h"
#include "runtime/cuda/cuda_check.h"

namespace sy {
namespace {

// The driver's virtual memory calls, looked up once through the runtime (no link to libcuda).
struct DriverCalls {
  CUresult (*get_granularity)(size_t*, const CUmemAllocationProp*,
                              CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*address_reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr,
                              unsigned long long) = nullptr;
  CUresult (*address_free)(CUdeviceptr, size_t) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                     unsigned long long) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long) = nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*error_string)(CUresult, const char**) = nullptr;
  bool ok = false;
};

template <typename Fn>
bool Lookup(const char* symbol, Fn* fn) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found{};
  // The ABI of CUDA 12.0, which these calls have kept since CUDA 10.2.
  if (cudaGetDriverEntryPointByVersion(symbol, &address, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess || address == nullptr) {
    static_cast<void>(cudaGetLastError());
    return false;
  }
  *fn = reinterpret_cast<Fn>(address);
  return true;
}

const DriverCalls& Driver() {
  static const DriverCalls calls = [] {
    DriverCalls c;
    c.ok = Lookup("cuMemGetAllocationGranularity", &c.get_granularity) &&
           Lookup("cuMemAddressReserve", &c.address_reserve) &&
           Lookup("cuMemAddressFree", &c.address_free) && Lookup("cuMemCreate", &c.create) &&
           Lookup("cuMemRelease", &c.release) && Lookup("cuMemMap", &c.map) &&
           Lookup("cuMemUnmap", &c.unmap) && Lookup("cuMemSetAccess", &c.set_access) &&
           Lookup("cuGetErrorString", &c.error_string);
    return c;
  }();
  return calls;
}

const char* ErrorString(CUresult result) {
  const char* text = nullptr;
  if (Driver().error_string == nullptr || Driver().error_string(result, &text) != CUDA_SUCCESS ||
      text == nullptr) {
    return "unknown driver error";
  }
  return text;
}

#define SY_CU_CHECK(expr) SY_VENDOR_CHECK_GEN(expr, CUDA_SUCCESS, ErrorString, "CUDA driver")

CUmemAllocationProp DeviceProp(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

CUdeviceptr Address(void* data) { return reinterpret_cast<CUdeviceptr>(data); }

// The driver calls need the device's primary context current on the calling thread (a thread that
// has made no runtime call yet has none): cudaSetDevice makes it so.
void MakeCurrent(int device) { SY_CUDA_CHECK(cudaSetDevice(device)); }

}  // namespace

Result<std::unique_ptr<CudaReleasableMemory>> CudaReleasableMemory::Create(int device) {
  if (!Driver().ok) {
    return UnavailableError(
        "the CUDA driver does not provide virtual memory management (cuMemCreate, cuMemMap)");
  }
  MakeCurrent(device);
  const CUmemAllocationProp prop = DeviceProp(device);
  size_t granularity = 0;
  const CUresult result =
      Driver().get_granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (result != CUDA_SUCCESS || granularity == 0) {
    return UnavailableError(std::string("cuda:") + std::to_string(device) +
                            ": cuMemGetAllocationGranularity failed: " + ErrorString(result));
  }
  return std::unique_ptr<CudaReleasableMemory>(new CudaReleasableMemory(device, granularity));
}

CudaReleasableMemory::CudaReleasableMemory(int device, size_t granularity)
    : device_(device), granularity_(granularity) {}

CudaReleasableMemory::~CudaReleasableMemory() {
  MutexLock lock(&mutex_);
  SY_CHECK(ranges_.empty()) << ranges_.size()
                            << " releasable CUDA buffers outlive their backend's memory";
}

Result<std::shared_ptr<Buffer>> CudaReleasableMemory::Allocate(size_t bytes) {
  const size_t reserved =
      std::max<size_t>(1, (bytes + granularity_ - 1) / granularity_) * granularity_;
  MakeCurrent(device_);
  CUdeviceptr address = 0;
  const CUresult reserve = Driver().address_reserve(&address, reserved, granularity_, 0, 0);
  if (reserve == CUDA_ERROR_OUT_OF_MEMORY) {
    return ResourceExhaustedError("cuda:" + std::to_string(device_) + ": reserving " +
                                  std::to_string(reserved) + " bytes of address space failed");
  }
  SY_CU_CHECK(reserve);
  void* data = reinterpret_cast<void*>(address);
  {
    MutexLock lock(&mutex_);
    Range& range = ranges_[data];
    range.bytes = reserved;
    Status mapped = Map(data, range);
    if (!mapped.ok()) {
      ranges_.erase(data);
      SY_CU_CHECK(Driver().address_free(address, reserved));
      return mapped;
    }
  }
  return std::make_shared<Buffer>(data, bytes, Device::Cuda(device_),
                                  [this](void* p, size_t) { Free(p); });
}

bool CudaReleasableMemory::Owns(const Buffer& buffer) const {
  MutexLock lock(&mutex_);
  return ranges_.count(buffer.data()) == 1;
}

void CudaReleasableMemory::Release(const Buffer& buffer) {
  MutexLock lock(&mutex_);
  auto it = ranges_.find(buffer.data());
  SY_CHECK(it != ranges_.end()) << "Release of a CUDA buffer that is not releasable";
  Unmap(it->first, it->second);
}

Status CudaReleasableMemory::Restore(const Buffer& buffer) {
  MutexLock lock(&mutex_);
  auto it = ranges_.find(buffer.data());
  SY_CHECK(it != ranges_.end()) << "Restore of a CUDA buffer that is not releasable";
  return Map(it->first, it->second);
}

size_t CudaReleasableMemory::mapped_bytes() const {
  MutexLock lock(&mutex_);
  return mapped_;
}

size_t CudaReleasableMemory::peak_mapped_bytes() const {
  MutexLock lock(&mutex_);
  return peak_mapped_;
}

Status CudaReleasableMemory::Map(void* data, Range& range) {
  if (range.handle != 0) return Status::Ok();
  MakeCurrent(device_);
  const CUmemAllocationProp prop = DeviceProp(device_);
  CUmemGenericAllocationHandle handle = 0;
  const CUresult created = Driver().create(&handle, range.bytes, &prop, 0);
  if (created == CUDA_ERROR_OUT_OF_MEMORY) {
    return ResourceExhaustedError("cuda:" + std::to_string(device_) + ": out of memory mapping " +
                                  std::to_string(range.bytes) +
                                  " bytes of a gathered parameter: lower the batch size or use "
                                  "more ranks");
  }
  SY_CU_CHECK(created);
  SY_CU_CHECK(Driver().map(Address(data), range.bytes, 0, handle, 0));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  SY_CU_CHECK(Driver().set_access(Address(data), range.bytes, &access, 1));
  range.handle = handle;
  mapped_ += range.bytes;
  peak_mapped_ = std::max(peak_mapped_, mapped_);
  return Status::Ok();
}

void CudaReleasableMemory::Unmap(void* data, Range& range) {
  if (range.handle == 0) return;
  MakeCurrent(device_);
  SY_CU_CHECK(Driver().unmap(Address(data), range.bytes));
  SY_CU_CHECK(Driver().release(range.handle));
  range.handle = 0;
  mapped_ -= range.bytes;
}

void CudaReleasableMemory::Free(void* data) {
  MutexLock lock(&mutex_);
  auto it = ranges_.find(data);
  SY_CHECK(it != ranges_.end()) << "free of a CUDA buffer that is not releasable";
  Range& range = it->second;
  // As SY_CUDA_CHECK_TEARDOWN: during process exit the driver may already be shut down, and the
  // memory went with it.
  const cudaError_t current = cudaSetDevice(device_);
  if (current == cudaErrorCudartUnloading) {
    static_cast<void>(cudaGetLastError());
    ranges_.erase(it);
    return;
  }
  SY_CUDA_CHECK(current);
  auto teardown = [](CUresult result) {
    SY_CHECK(result == CUDA_SUCCESS || result == CUDA_ERROR_DEINITIALIZED)
        << "CUDA driver call failed while freeing releasable memory: " << ErrorString(result);
  };
  if (range.handle != 0) {
    teardown(Driver().unmap(Address(data), range.bytes));
    teardown(Driver().release(range.handle));
    mapped_ -= range.bytes;
  }
  teardown(Driver().address_free(Address(data), range.bytes));
  ranges_.erase(it);
}

}  // namespace sy
