// SY_CUDA_CHECK and SY_CUBLAS_CHECK: abort with the call text, the vendor's code and its error
// string when a CUDA runtime or cuBLAS call fails (runtime/core/vendor_check.h explains why a
// failed vendor call is a broken invariant rather than a Status).
//
// Private to runtime/cuda: it includes the CUDA headers, so no public header may include it.
// Thread-safety: the macros are expressions over their arguments; no shared state.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "runtime/core/vendor_check.h"
#include "runtime/cuda/cublas_library.h"

#define SY_CUDA_CHECK(expr) SY_VENDOR_CHECK_GEN(expr, cudaSuccess, cudaGetErrorString, "CUDA")
#define SY_CUBLAS_CHECK(expr) \
  SY_VENDOR_CHECK_GEN(expr, CUBLAS_STATUS_SUCCESS, ::sy::CublasStatusString, "cuBLAS")

// For destructors and release functions, which may run during process exit after the CUDA runtime
// has begun unloading: the handle went with the context then, so that one error is not a failure.
#define SY_CUDA_CHECK_TEARDOWN(expr)                       \
  do {                                                     \
    cudaError_t sy_teardown_result_ = (expr);              \
    if (sy_teardown_result_ == cudaErrorCudartUnloading) { \
      static_cast<void>(cudaGetLastError());               \
    } else {                                               \
      SY_CUDA_CHECK(sy_teardown_result_);                  \
    }                                                      \
  } while (0)

// Checks that the kernel launch just issued was accepted (bad configuration, missing image for
// this architecture). Asynchronous faults surface at the next synchronizing call instead.
#define SY_CUDA_CHECK_LAUNCH() SY_CUDA_CHECK(cudaGetLastError())
