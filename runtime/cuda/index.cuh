// Index kernels of the CUDA backend: embedding gather and scatter-add, and the row gather /
// weighted scatter-add that dispatch and combine MoE tokens.
//
// Indices are not validated on the host (that would need a device sync). A gather with an
// out-of-range index writes a row of NaN, so the error shows in the result; a scatter with one
// skips that row.
//
// Scatter-adds are deterministic: each output row is owned by one block, which adds its
// contributions in ascending source-row order (no atomics), so the same inputs give the same bits
// on every run, as on the cpu (training on cuda is reproducible run to run, and the expert store's
// working set computes exactly what the resident experts do). A scatter of at most
// kScatterScanRows rows (decode) has each output row scan the indices; a larger one (training)
// first sorts the source rows by index with CUB's stable radix sort, in a caller's workspace of
// ScatterAddWorkspaceBytes bytes.
// Launchers enqueue on `stream`, never synchronize and allocate nothing.
//
// Thread-safety: launchers may be called from any thread; ordering is that of `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/cuda/kernel_types.h"

namespace sy::cuda {

// Every FloatIn/FloatOut operand below is f32, bf16 or f16 independently (Note [16-bit operands]);
// weights are f32.

// out[n, :] = table[ids[n], :]; table [vocab, cols].
void LaunchEmbeddingGather(FloatIn table, int64_t vocab, const int32_t* ids, int64_t n,
                           int64_t cols, FloatOut out, cudaStream_t stream);
// Scatters of at most this many source rows need no workspace.
inline constexpr int64_t kScatterScanRows = 256;
// The workspace a scatter-add of `m` source rows into `n` output rows needs (0 up to
// kScatterScanRows rows).
size_t ScatterAddWorkspaceBytes(int64_t m, int64_t n);

// dtable[ids[n], :] += dout[n, :]; `workspace`: `workspace_bytes` =
// ScatterAddWorkspaceBytes(n, vocab) bytes.
void LaunchEmbeddingScatterAdd(FloatIn dout, const int32_t* ids, int64_t n, int64_t cols,
                               FloatOut dtable, int64_t vocab, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream);

// out[m, :] = src[indices[m], :], src [n, cols].
void LaunchGatherRows(FloatIn src, int64_t n, const int32_t* indices, int64_t m, int64_t cols,
                      FloatOut out, cudaStream_t stream);
// out[indices[m], :] += weights[m] * src[m, :] (weights null: 1), out [n, cols]; `workspace`:
// `workspace_bytes` = ScatterAddWorkspaceBytes(m, n) bytes.
void LaunchScatterAddRows(FloatIn src, const int32_t* indices, const float* weights, int64_t m,
                          int64_t cols, FloatOut out, int64_t n, void* workspace,
                          size_t workspace_bytes, cudaStream_t stream);

}  // namespace sy::cuda
