// RMSNorm and rotary-embedding kernels of the CUDA backend.
//
// RmsNorm runs one block per row. Its backward computes dweight with the deterministic two-stage
// column reduction (column_reduce.cuh) before it writes dx, so dx may alias x or dout. Rope runs
// one block per token: the block computes the token's cos/sin table once (angles in double, so
// large positions keep full f32 accuracy) and rotates every head with it.
// Launchers enqueue on `stream`, never synchronize, and allocate nothing: RmsNormBackward takes a
// workspace of RmsNormBackwardWorkspaceFloats floats.
//
// Thread-safety: launchers may be called from any thread; ordering is that of `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/cuda/kernel_types.h"

namespace sy::cuda {

// out = x * rstd * weight per row of x [rows, cols]; weight [cols]; x, weight and out each
// f32/bf16/f16 (rstd f32). rstd may be null.
void LaunchRmsNorm(FloatIn x, const void* weight, FloatType weight_type, int64_t rows, int64_t cols,
                   float eps, FloatOut out, float* rstd, cudaStream_t stream);

int64_t RmsNormBackwardWorkspaceFloats(int64_t rows, int64_t cols);
// dx = rstd * dout * w - x * rstd^3 * mean(dout * w * x); dweight = sum_r dout * x * rstd
// (overwritten). x, weight, dout and dx each f32/bf16/f16; rstd and dweight f32.
void LaunchRmsNormBackward(FloatIn x, const void* weight, FloatType weight_type, const float* rstd,
                           FloatIn dout, int64_t rows, int64_t cols, FloatOut dx, float* dweight,
                           float* workspace, cudaStream_t stream);

// Rotate-half rotary embedding of the first `rotary` values of each head of x [tokens, heads, dim]
// (the rest pass through); `backward` applies the inverse rotation (the gradient of the forward);
// x and out each f32/bf16/f16. out may alias x (of one dtype).
void LaunchRope(FloatIn x, const int32_t* positions, int64_t tokens, int64_t heads, int64_t dim,
                int64_t rotary, float theta, bool backward, FloatOut out, cudaStream_t stream);

}  // namespace sy::cuda
