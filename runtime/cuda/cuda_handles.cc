#include "runtime/cuda/cuda_handles.h"

#include "runtime/cuda/cuda_check.h"

namespace sy {

ScopedCudaDevice::ScopedCudaDevice(int device) {
  int current = -1;
  cudaError_t result = cudaGetDevice(&current);
  if (result == cudaErrorCudartUnloading) {  // process exit: nothing left to make current
    static_cast<void>(cudaGetLastError());
    return;
  }
  SY_CUDA_CHECK(result);
  if (current != device) {
    SY_CUDA_CHECK(cudaSetDevice(device));
    previous_ = current;
  }
}

ScopedCudaDevice::~ScopedCudaDevice() {
  if (previous_ >= 0) SY_CUDA_CHECK(cudaSetDevice(previous_));
}

CudaStream::CudaStream(int device) : device_(device) {
  ScopedCudaDevice guard(device_);
  SY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaStream::~CudaStream() {
  ScopedCudaDevice guard(device_);
  SY_CUDA_CHECK_TEARDOWN(cudaStreamDestroy(stream_));
}

CudaEvent::CudaEvent(int device) : device_(device) {
  ScopedCudaDevice guard(device_);
  SY_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  ScopedCudaDevice guard(device_);
  SY_CUDA_CHECK_TEARDOWN(cudaEventDestroy(event_));
}

void CudaEvent::Synchronize() { SY_CUDA_CHECK(cudaEventSynchronize(event_)); }

bool CudaEvent::Query() {
  cudaError_t result = cudaEventQuery(event_);
  if (result == cudaErrorNotReady) return false;
  SY_CUDA_CHECK(result);
  return true;
}

CublasHandle::CublasHandle(const CublasLibrary& cublas, int device, cudaStream_t stream,
                           void* workspace, size_t workspace_bytes)
    : cublas_(cublas), device_(device) {
  ScopedCudaDevice guard(device_);
  SY_CUBLAS_CHECK(cublas_.create(&handle_));
  // cublasSetStream resets the workspace to cuBLAS's own pool, so the workspace is set after it.
  SY_CUBLAS_CHECK(cublas_.set_stream(handle_, stream));
  SY_CUBLAS_CHECK(cublas_.set_workspace(handle_, workspace, workspace_bytes));
  // Plain FP32 math: no TF32 for f32 GEMMs, so results track the CPU reference closely. A GEMM
  // with a 16-bit output (Note [16-bit GEMM operands] in cuda_gemm.cc) reduces in f32 and rounds
  // once: cuBLAS may otherwise reduce split-k partial sums in the output's 16-bit type. (The flag
  // concerns reduced-precision outputs only; f32 GEMMs are unaffected.)
  SY_CUBLAS_CHECK(cublas_.set_math_mode(
      handle_, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                         CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
}

CublasHandle::~CublasHandle() {
  ScopedCudaDevice guard(device_);
  // Not checked: at process exit the context may already be gone, and a handle that cannot be
  // destroyed then is no longer anyone's problem.
  static_cast<void>(cublas_.destroy(handle_));
}

CudaDeviceMemory::CudaDeviceMemory(int device, size_t bytes) : device_(device), bytes_(bytes) {
  ScopedCudaDevice guard(device_);
  SY_CUDA_CHECK(cudaMalloc(&data_, bytes_));
}

CudaDeviceMemory::~CudaDeviceMemory() {
  ScopedCudaDevice guard(device_);
  SY_CUDA_CHECK_TEARDOWN(cudaFree(data_));
}

}  // namespace sy
