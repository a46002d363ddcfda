// cuBLAS, loaded with dlopen when the first CUDA backend is created instead of linked into every
// binary. Linked, libcublas made each process that contains the CUDA backend run cuBLASLt's static
// initializers at startup, GPU or not: ~0.18 s and ~210 MB of private memory on this repository's
// machine, for `switchyard --version`, for every MPI rank and every test process.
//
// The file is SY_CUBLAS_LIBRARY (the toolkit's soname, libcublas.so.<CUDA major>, set by
// runtime/cuda/cuda.cmake), found as the dynamic linker finds any library: LD_LIBRARY_PATH, the
// binary's RUNPATH (the toolkit's library directory, where libcudart comes from too), ld.so.conf.
//
// Private to runtime/cuda: includes the cuBLAS header.
// Ownership: the library stays loaded until the process exits (never dlclose'd).
// Thread-safety: LoadCublas may be called from any thread; the first call loads, concurrent ones
// wait for it; the table is immutable afterwards.
#pragma once

#include <cublas_v2.h>

#include "runtime/core/status.h"

namespace sy {

// The cuBLAS entry points the CUDA backend calls (cublas_v2.h's names, which are macros for the
// exported _v2 symbols where they have one). The two GEMMs are spelled out: in C++ the header
// overloads their names with inline wrappers taking the older cudaDataType compute type.
using CublasGemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                        int, int, const void*, const void*, cudaDataType, int,
                                        const void*, cudaDataType, int, const void*, void*,
                                        cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
using CublasGemmStridedBatchedEx = cublasStatus_t (*)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
    cudaDataType, int, long long int, const void*, cudaDataType, int, long long int, const void*,
    void*, cudaDataType, int, long long int, int, cublasComputeType_t, cublasGemmAlgo_t);

struct CublasLibrary {
  decltype(&::cublasCreate) create = nullptr;
  decltype(&::cublasDestroy) destroy = nullptr;
  decltype(&::cublasSetStream) set_stream = nullptr;
  decltype(&::cublasSetWorkspace) set_workspace = nullptr;
  decltype(&::cublasSetMathMode) set_math_mode = nullptr;
  CublasGemmEx gemm_ex = nullptr;
  CublasGemmStridedBatchedEx gemm_strided_batched_ex = nullptr;
  decltype(&::cublasGetStatusString) status_string = nullptr;
};

// The loaded library, or FailedPrecondition naming the file, the loader's reason and the fix. A
// failure is remembered: later calls return it again without retrying.
Result<const CublasLibrary*> LoadCublas();

// cuBLAS's text for `status` once the library is loaded; "(cuBLAS not loaded)" before.
const char* CublasStatusString(cublasStatus_t status);

}  // namespace sy
