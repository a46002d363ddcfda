// The fused AdamW / Adam update on a CUDA device: the math of AdamUpdateReference
// (optim/update_kernels.h) in one pass over param, grad, m and v, optionally writing the updated
// params into a bf16 or f16 compute copy in the same pass.
//
// Every operation is spelled out with correctly rounded intrinsics (__fmaf_rn, __fdiv_rn,
// __fsqrt_rn, ...) and the file is built with --fmad=false, so the device result equals the CPU
// reference bit for bit, and hence torch.optim's CPU result. The compute copy rounds to nearest
// even exactly as F32ToBF16 / F32ToF16 (runtime/core/dtype.h).
//
// This header includes no CUDA headers; it is declared only when the build has SY_ENABLE_CUDA.
//
// Ordering: the kernel is enqueued on `stream` (a cudaStream_t; nullptr is the legacy default
// stream) and the call returns without waiting. No allocation, no synchronization. A rejected
// launch aborts (SY_CHECK, as every failed vendor call); faults during the kernel surface at the
// caller's next synchronization.
// Ownership: all buffers are device memory owned by the caller, of n elements each, and must not
// overlap. Thread-safety: reentrant; calls on one stream run in order.
#pragma once

#include <cstddef>

#include "optim/update_kernels.h"
#include "runtime/core/dtype.h"

namespace sy {

// Enqueues one Adam/AdamW update of n elements with the scalars of this step
// (MakeAdamStepScalars, computed on the host from the group's step counter). `compute_copy` is
// null (no copy) or n elements of `compute_dtype`, which must be kBF16 or kF16 (checked).
void LaunchAdamUpdateCuda(const AdamStepScalars& scalars, float* param, const float* grad, float* m,
                          float* v, size_t n, void* compute_copy, DType compute_dtype,
                          void* stream);

}  // namespace sy
