// Row and column reductions, softmax and cross-entropy kernels of the CUDA backend. Row kernels
// run one block per row of a contiguous [rows, cols] matrix; column reductions use the
// deterministic two-stage scheme of column_reduce.cuh and need a caller-provided workspace.
// Launchers enqueue on `stream`, never synchronize and allocate nothing.
//
// Thread-safety: launchers may be called from any thread; ordering is that of `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/cuda/kernel_types.h"

namespace sy::cuda {

enum class ReduceKind : uint8_t { kSum, kMean, kMax, kSumSquares };

// Every FloatIn/FloatOut operand below is f32, bf16 or f16 independently (Note [16-bit operands]);
// lse, losses and the column reduction's out are f32.

// out[r] = reduce(x[r, :]).
void LaunchReduceRows(FloatIn x, int64_t rows, int64_t cols, ReduceKind kind, FloatOut out,
                      cudaStream_t stream);

// Floats of workspace LaunchReduceColumns needs.
int64_t ReduceColumnsWorkspaceFloats(int64_t rows, int64_t cols);
// out[c] = reduce(x[:, c]).
void LaunchReduceColumns(FloatIn x, int64_t rows, int64_t cols, ReduceKind kind, float* workspace,
                         float* out, cudaStream_t stream);

// out[r, :] = softmax(x[r, :]).
void LaunchSoftmax(FloatIn x, int64_t rows, int64_t cols, FloatOut out, cudaStream_t stream);
// dx = y * (dy - sum(dy * y)) per row.
void LaunchSoftmaxBackward(FloatIn y, FloatIn dy, int64_t rows, int64_t cols, FloatOut dx,
                           cudaStream_t stream);

// losses[r] = lse(logits[r]) - logits[r, targets[r]], 0 where targets[r] == -1 (NaN for any other
// target outside [0, cols)). lse may be null.
void LaunchCrossEntropy(FloatIn logits, const int32_t* targets, int64_t rows, int64_t cols,
                        float* losses, float* lse, cudaStream_t stream);
// dlogits[r] = dlosses[r] * (softmax(logits[r]) - onehot(targets[r])), zero rows for target -1.
void LaunchCrossEntropyBackward(FloatIn logits, const int32_t* targets, const float* lse,
                                FloatIn dlosses, int64_t rows, int64_t cols, FloatOut dlogits,
                                cudaStream_t stream);

}  // namespace sy::cuda
