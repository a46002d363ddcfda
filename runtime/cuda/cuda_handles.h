// RAII owners for the CUDA runtime and cuBLAS handles the CUDA backend holds, and the Stream and
// Event implementations it hands out.
//
// Ownership: each object owns exactly one handle and destroys it in its destructor; copy is
// deleted (a copied owner would destroy the handle twice), move is not needed by the backend and is
// deleted too. CudaStream and CudaEvent are created on, and remember, one device; their
// destructors make that device current while they destroy the handle.
// Thread-safety: the CUDA runtime is thread-safe, so distinct objects may be used from distinct
// threads; one object is used as the Backend contract says (streams from the thread driving them).
// Ordering: CudaEvent::Synchronize/Query observe the work before the event's last record on
// whichever stream recorded it.
//
// Private to runtime/cuda: includes the CUDA headers.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "runtime/backend/backend.h"
#include "runtime/cuda/cublas_library.h"

namespace sy {

// Makes `device` current for the scope when it is not already, and restores the previous device on
// exit. Every CudaBackend entry point opens one, so a thread driving several GPUs stays correct.
class ScopedCudaDevice {
 public:
  explicit ScopedCudaDevice(int device);
  ~ScopedCudaDevice();
  ScopedCudaDevice(const ScopedCudaDevice&) = delete;
  ScopedCudaDevice& operator=(const ScopedCudaDevice&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

// A non-blocking stream (no implicit ordering with the legacy default stream).
class CudaStream final : public Stream {
 public:
  explicit CudaStream(int device);
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
};

// An event without timing (cheaper to record and to wait on).
class CudaEvent final : public Event {
 public:
  explicit CudaEvent(int device);
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  void Synchronize() override;
  bool Query() override;

  cudaEvent_t get() const { return event_; }
  int device() const { return device_; }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

// A cuBLAS handle bound to one stream and to a caller-owned workspace, made through `cublas` (the
// loaded library, which outlives every handle: LoadCublas never unloads it).
class CublasHandle {
 public:
  CublasHandle(const CublasLibrary& cublas, int device, cudaStream_t stream, void* workspace,
               size_t workspace_bytes);
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;

  cublasHandle_t get() const { return handle_; }
  // The entry points to call with get().
  const CublasLibrary& library() const { return cublas_; }

 private:
  const CublasLibrary& cublas_;
  int device_;
  cublasHandle_t handle_ = nullptr;
};

// Device memory from cudaMalloc, freed with cudaFree (the cuBLAS workspace: it must stay put for
// the handle's lifetime, so it does not come from the caching allocator).
class CudaDeviceMemory {
 public:
  CudaDeviceMemory(int device, size_t bytes);
  ~CudaDeviceMemory();
  CudaDeviceMemory(const CudaDeviceMemory&) = delete;
  CudaDeviceMemory& operator=(const CudaDeviceMemory&) = delete;

  void* get() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  int device_;
  void* data_ = nullptr;
  size_t bytes_;
};

}  // namespace sy
