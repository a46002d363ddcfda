// SY_VENDOR_CHECK_GEN: the one generator behind SY_CUDA_CHECK, SY_CUBLAS_CHECK, SY_NCCL_CHECK and
// SY_MPI_CHECK (as ggml's CUDA_CHECK_GEN). A vendor call that fails is a broken invariant here
// (the device or the job is in an unknown state), so it aborts through SY_CHECK with the call
// text, the vendor's code and its error string.
//
// Each vendor macro is defined in a private header of the code that includes the vendor's API
// (runtime/cuda/cuda_check.h, parallel/mpi_check.h), so no public header pulls in vendor headers.
#pragma once

#include "runtime/core/check.h"

#define SY_VENDOR_CHECK_GEN(expr, success, error_string_fn, vendor)                               \
  do {                                                                                            \
    auto sy_vendor_result_ = (expr);                                                              \
    SY_CHECK(sy_vendor_result_ == (success)) << vendor << " call `" #expr "` failed with code "   \
                                             << static_cast<long long>(sy_vendor_result_) << ": " \
                                             << error_string_fn(sy_vendor_result_);               \
  } while (0)
