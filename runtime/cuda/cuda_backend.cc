// CudaBackend: device discovery, memory, streams, events, copies and operator scratch. The
// operators live in cuda_ops.cc and cuda_gemm.cc.
#include "runtime/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>
#include <utility>

#include "runtime/core/check.h"
#include "runtime/cuda/cuda_backend_impl.h"
#include "runtime/cuda/cuda_check.h"

namespace sy {
namespace {

// cuBLAS workspace: NVIDIA recommends 32 MiB on Hopper and 4 MiB before it.
size_t CublasWorkspaceBytes(int compute_major) {
  return compute_major >= 9 ? size_t{32} << 20 : size_t{4} << 20;
}

}  // namespace

int CudaDeviceCount() {
  int count = 0;
  cudaError_t result = cudaGetDeviceCount(&count);
  if (result != cudaSuccess) {
    // No driver, no device, or a driver older than the runtime: none usable. Clear the sticky
    // last-error so later calls are not blamed for it.
    static_cast<void>(cudaGetLastError());
    return 0;
  }
  return count;
}

Result<std::unique_ptr<Backend>> CreateCudaBackend(int index, const BackendOptions& options) {
  static_cast<void>(options);  // nothing to configure yet: threads and the sim budget are host-side
  const int count = CudaDeviceCount();
  if (index < 0 || index >= count) {
    return UnavailableError("device cuda:" + std::to_string(index) + " is not present: this " +
                            "machine has " + std::to_string(count) +
                            " usable CUDA device(s) (is the NVIDIA driver installed and a GPU " +
                            "visible, e.g. CUDA_VISIBLE_DEVICES?)");
  }
  cudaDeviceProp prop{};
  cudaError_t result = cudaGetDeviceProperties(&prop, index);
  if (result != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return UnavailableError("device cuda:" + std::to_string(index) +
                            ": cudaGetDeviceProperties failed: " + cudaGetErrorString(result));
  }
  CudaDeviceInfo info;
  info.index = index;
  info.name = prop.name;
  info.total_memory = prop.totalGlobalMem;
  info.shared_memory_optin = prop.sharedMemPerBlockOptin;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  SY_ASSIGN_OR_RETURN(const CublasLibrary* cublas, LoadCublas());
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(info, *cublas));
}

void* CudaComputeStream(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  SY_CHECK(cuda != nullptr) << "CudaComputeStream: " << backend.device().ToString()
                            << " is not a CUDA backend";
  return cuda->stream();
}

CudaBackend::CudaBackend(const CudaDeviceInfo& info, const CublasLibrary& cublas) : info_(info) {
  ScopedCudaDevice guard(info_.index);
  const int device = info_.index;
  allocator_ = std::make_unique<CachingAllocator>(
      Device::Cuda(device),
      [device](size_t bytes) -> void* {
        ScopedCudaDevice allocate_guard(device);
        void* data = nullptr;
        cudaError_t result = cudaMalloc(&data, bytes);
        if (result == cudaErrorMemoryAllocation) {
          static_cast<void>(cudaGetLastError());  // out of memory is a Status, not a fault
          return nullptr;
        }
        SY_CUDA_CHECK(result);
        return data;
      },
      [device](void* data, size_t) {
        ScopedCudaDevice free_guard(device);
        SY_CUDA_CHECK_TEARDOWN(cudaFree(data));
      },
      info_.total_memory);
  compute_ = std::make_unique<CudaStream>(device);
  cublas_workspace_ =
      std::make_unique<CudaDeviceMemory>(device, CublasWorkspaceBytes(info_.compute_major));
  cublas_ = std::make_unique<CublasHandle>(cublas, device, compute_->get(),
                                           cublas_workspace_->get(), cublas_workspace_->bytes());
}

CudaBackend::~CudaBackend() {
  ScopedCudaDevice guard(info_.index);
  // Work still queued may read scratch blocks or the cuBLAS workspace: let it finish first.
  SY_CUDA_CHECK_TEARDOWN(cudaDeviceSynchronize());
  MutexLock lock(&retired_mutex_);
  retired_.clear();
  free_events_.clear();
}

BackendCaps CudaBackend::caps() const {
  // Every operator takes f32, bf16 and f16 operands (Note [16-bit operands]): runtime/cuda's
  // kernels read and write through each operand's dtype, and the GEMMs dispatch as
  // Note [16-bit GEMM operands] in cuda_gemm.cc says.
  return BackendCaps{.async_copies = true,
                     .pinned_host = true,
                     .host_accessible = false,
                     .sixteen_bit_activations = true};
}

std::string CudaBackend::name() const {
  char memory[32];
  std::snprintf(memory, sizeof(memory), "%.1f GiB",
                static_cast<double>(info_.total_memory) / static_cast<double>(size_t{1} << 30));
  return device().ToString() + " (" + info_.name + ", " + memory + ", sm_" +
         std::to_string(info_.compute_major) + std::to_string(info_.compute_minor) + ")";
}

// ---- memory ----

Result<Tensor> CudaBackend::AllocateDevice(DType dtype, Shape shape) {
  ReclaimRetired();
  SY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                      allocator_->Allocate(DTypeBytes(dtype, shape.numel())));
  return Tensor(std::move(buffer), dtype, shape);
}

Result<Tensor> CudaBackend::AllocatePinnedHost(DType dtype, Shape shape) {
  ScopedCudaDevice guard(info_.index);
  const size_t bytes = DTypeBytes(dtype, shape.numel());
  void* data = nullptr;
  // Portable: pinned for every device of the process, so a multi-GPU host shares staging buffers.
  cudaError_t result = cudaHostAlloc(&data, bytes > 0 ? bytes : 1, cudaHostAllocPortable);
  if (result != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return ResourceExhaustedError("pinned host allocation of " + std::to_string(bytes) +
                                  " bytes failed (" + cudaGetErrorString(result) +
                                  "): lower the host cache size or the batch size");
  }
  auto buffer = std::make_shared<Buffer>(
      data, bytes, Device::Cpu(), [](void* p, size_t) { SY_CUDA_CHECK_TEARDOWN(cudaFreeHost(p)); },
      /*pinned=*/true);
  return Tensor(std::move(buffer), dtype, shape);
}

MemoryStats CudaBackend::memory_stats() const {
  MemoryStats stats = allocator_->stats();
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    stats.available = free_bytes + (stats.bytes_reserved - stats.bytes_in_use);
  }
  MutexLock lock(&releasable_mutex_);
  if (releasable_ != nullptr) stats.releasable_bytes_mapped = releasable_->mapped_bytes();
  return stats;
}
void CudaBackend::ResetPeakMemory() { allocator_->ResetPeak(); }

void CudaBackend::EmptyCache() {
  ReclaimRetired();
  allocator_->EmptyCache();
}

// ---- releasable memory ----

Result<Tensor> CudaBackend::AllocateReleasable(DType dtype, Shape shape) {
  CudaReleasableMemory* memory = nullptr;
  {
    MutexLock lock(&releasable_mutex_);
    if (releasable_ == nullptr) {
      SY_ASSIGN_OR_RETURN(releasable_, CudaReleasableMemory::Create(info_.index));
    }
    memory = releasable_.get();
  }
  SY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                      memory->Allocate(DTypeBytes(dtype, shape.numel())));
  return Tensor(std::move(buffer), dtype, shape);
}

bool CudaBackend::IsReleasable(const Buffer& buffer) const {
  MutexLock lock(&releasable_mutex_);
  return releasable_ != nullptr && releasable_->Owns(buffer);
}

void CudaBackend::ReleaseBacking(const Buffer& buffer) {
  MutexLock lock(&releasable_mutex_);
  SY_CHECK(releasable_ != nullptr)
      << "ReleaseBacking on " << device().ToString() << " before any AllocateReleasable";
  releasable_->Release(buffer);
}

Status CudaBackend::RestoreBacking(const Buffer& buffer) {
  MutexLock lock(&releasable_mutex_);
  SY_CHECK(releasable_ != nullptr)
      << "RestoreBacking on " << device().ToString() << " before any AllocateReleasable";
  return releasable_->Restore(buffer);
}

// ---- scratch ----

void* CudaBackend::Scratch::GetBytes(size_t bytes) {
  if (buffers_.empty()) backend_.ReclaimRetired();
  Result<std::shared_ptr<Buffer>> buffer = backend_.allocator_->Allocate(bytes);
  SY_CHECK(buffer.ok()) << "operator scratch on " << backend_.device().ToString() << ": "
                        << buffer.status().ToString();
  buffers_.push_back(std::move(buffer).value());
  return buffers_.back()->data();
}

CudaBackend::Scratch::~Scratch() { backend_.Retire(std::move(buffers_)); }

void CudaBackend::Retire(std::vector<std::shared_ptr<Buffer>> buffers) {
  if (buffers.empty()) return;
  std::unique_ptr<CudaEvent> event;
  {
    MutexLock lock(&retired_mutex_);
    if (!free_events_.empty()) {
      event = std::move(free_events_.back());
      free_events_.pop_back();
    }
  }
  if (event == nullptr) event = std::make_unique<CudaEvent>(info_.index);
  SY_CUDA_CHECK(cudaEventRecord(event->get(), stream()));
  MutexLock lock(&retired_mutex_);
  retired_.push_back(Retired{std::move(event), std::move(buffers)});
}

void CudaBackend::ReclaimRetired() {
  std::vector<std::shared_ptr<Buffer>> done;
  {
    MutexLock lock(&retired_mutex_);
    // Retired entries complete in order: they were all recorded on the compute stream.
    while (!retired_.empty() && retired_.front().event->Query()) {
      Retired& front = retired_.front();
      for (auto& buffer : front.buffers) done.push_back(std::move(buffer));
      free_events_.push_back(std::move(front.event));
      retired_.pop_front();
    }
  }
  // `done` releases the blocks to the allocator here, outside retired_mutex_.
}

// ---- streams and events ----

Stream& CudaBackend::compute_stream() { return *compute_; }

std::unique_ptr<Stream> CudaBackend::CreateStream() {
  return std::make_unique<CudaStream>(info_.index);
}

std::unique_ptr<Event> CudaBackend::CreateEvent() {
  return std::make_unique<CudaEvent>(info_.index);
}

cudaStream_t CudaBackend::NativeStream(Stream& stream) const {
  auto* cuda_stream = dynamic_cast<CudaStream*>(&stream);
  SY_CHECK(cuda_stream != nullptr)
      << "a stream from another backend passed to " << device().ToString();
  SY_CHECK_EQ(cuda_stream->device(), info_.index) << "stream of another CUDA device";
  return cuda_stream->get();
}

CudaEvent& CudaBackend::NativeEvent(Event& event) const {
  auto* cuda_event = dynamic_cast<CudaEvent*>(&event);
  SY_CHECK(cuda_event != nullptr) << "an event from another backend passed to "
                                  << device().ToString();
  return *cuda_event;
}

void CudaBackend::RecordEvent(Event& event, Stream& stream) {
  ScopedCudaDevice guard(info_.index);
  SY_CUDA_CHECK(cudaEventRecord(NativeEvent(event).get(), NativeStream(stream)));
}

void CudaBackend::StreamWaitEvent(Stream& stream, Event& event) {
  ScopedCudaDevice guard(info_.index);
  SY_CUDA_CHECK(cudaStreamWaitEvent(NativeStream(stream), NativeEvent(event).get(), 0));
}

void CudaBackend::SynchronizeStream(Stream& stream) {
  ScopedCudaDevice guard(info_.index);
  SY_CUDA_CHECK(cudaStreamSynchronize(NativeStream(stream)));
  if (&stream == compute_.get()) ReclaimRetired();
}

void CudaBackend::Synchronize() {
  ScopedCudaDevice guard(info_.index);
  SY_CUDA_CHECK(cudaDeviceSynchronize());
  ReclaimRetired();
}

// ---- copies ----

void CudaBackend::CopyAsync(const Tensor& src, const Tensor& dst, Stream& stream) {
  SY_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel())
      << "CopyAsync " << src.ToString() << " -> " << dst.ToString();
  SY_CHECK(src.is_contiguous() && dst.is_contiguous()) << "CopyAsync of a non-contiguous tensor";
  for (const Tensor* t : {&src, &dst}) {
    SY_CHECK(t->device().is_host() || t->device() == device())
        << "CopyAsync on " << device().ToString() << ": " << t->ToString()
        << " is neither host memory nor on this device";
  }
  if (src.nbytes() == 0) return;
  SY_CHECK(src.data() != nullptr && dst.data() != nullptr) << "CopyAsync of an undefined tensor";
  ScopedCudaDevice guard(info_.index);
  // cudaMemcpyDefault infers the direction from the pointers (unified addressing), so one call
  // covers host->device, device->host and device->device.
  SY_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDefault,
                                NativeStream(stream)));
}

// ---- operand checks ----

void CudaBackend::CheckOperand(const Tensor& t, const char* what) const {
  SY_CHECK(t.data() != nullptr || t.numel() == 0) << what << ": undefined tensor";
  SY_CHECK(t.is_contiguous()) << what << ": non-contiguous " << t.ToString();
  SY_CHECK(t.device() == device())
      << what << ": " << t.ToString() << " on a " << device().ToString() << " backend";
}

}  // namespace sy
