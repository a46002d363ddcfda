// The CUDA backend's entry points. This header includes no CUDA headers: the backend itself is
// declared and defined in runtime/cuda/*.cc and *.cu, built only when SY_HAVE_CUDA.
// Thread-safety: every function is thread-safe.
#pragma once

#include <memory>

#include "runtime/backend/backend.h"

namespace sy {

// The number of CUDA devices present (0 when there is no driver or no GPU).
int CudaDeviceCount();

// Creates the backend for GPU `index`; Unavailable when it does not exist.
Result<std::unique_ptr<Backend>> CreateCudaBackend(int index, const BackendOptions& options);

// The cudaStream_t (as void*) of a CUDA backend's compute stream, for kernels launched outside the
// backend (optim/cuda/) that must run in order with its operators. `backend` must be a CUDA
// backend (checked); the stream lives as long as the backend.
void* CudaComputeStream(Backend& backend);

}  // namespace sy
