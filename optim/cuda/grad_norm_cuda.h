// Gradient clipping on a CUDA device: the squared L2 norm of a buffer as per-block partial sums,
// and the in-place scale by the clip coefficient, for a trainer whose gradients stay on the GPU
// (launcher/training/device_adam.h). The host adds the partials in a fixed order, so the norm is
// the same run after run; it may differ from the CPU's GlobalGradNorm (optim/grad_clip.h) in the
// last bits, since the sums are grouped differently. The scale is the same float product as the
// CPU's ScaleGrads, element for element.
//
// This header includes no CUDA headers; it is declared only when the build has SY_ENABLE_CUDA.
//
// Ordering: each call enqueues one kernel on `stream` (a cudaStream_t; nullptr is the legacy
// default stream) and returns without waiting. No allocation, no synchronization.
// Ownership: the buffers are device memory owned by the caller. Thread-safety: reentrant; calls
// on one stream run in order.
#pragma once

#include <cstddef>

namespace sy {

// Blocks of the squared-norm kernel: the number of partial sums one call writes.
inline constexpr int kSquaredNormPartials = 256;

// partials[b] = sum over the elements that block b visits of double(x[i])^2, for b in
// [0, kSquaredNormPartials); all kSquaredNormPartials entries are written (zero for a block
// with no elements).
void LaunchSquaredNormPartialsCuda(const float* x, size_t n, double* partials, void* stream);

// x[i] *= factor for i in [0, n), each product rounded to float as on the CPU.
void LaunchScaleInPlaceCuda(float* x, size_t n, float factor, void* stream);

}  // namespace sy
