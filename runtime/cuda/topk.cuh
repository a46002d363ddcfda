// Per-row top-k selection (MoE router gating, sampling) for the CUDA backend.
//
// One block per row makes k passes over the row; pass i selects the largest element that ranks
// strictly below the element selected by pass i-1 in the order (value descending, index
// ascending), so the output is sorted, ties keep the lower index first, and no per-row state beyond
// the last selection is needed. Cost O(k * cols) per row: meant for small k.
//
// The launcher enqueues on `stream`, never synchronizes and allocates nothing.
// Thread-safety: may be called from any thread; ordering is that of `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/cuda/kernel_types.h"

namespace sy::cuda {

// values[r, i], indices[r, i] for i < k: the i-th largest of x[r, :] (x [rows, cols] f32, bf16 or
// f16, k <= cols; values f32, exact).
void LaunchTopK(FloatIn x, int64_t rows, int64_t cols, int k, float* values, int32_t* indices,
                cudaStream_t stream);

}  // namespace sy::cuda
