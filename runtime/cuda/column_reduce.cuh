// A deterministic two-stage reduction over the rows of a [rows, cols] matrix (one result per
// column), shared by Reduce(kFirst) and RmsNormBackward's dweight. Stage one reduces fixed chunks
// of rows into a [chunks, cols] workspace; stage two folds the chunks in order. The chunking
// depends only on the shape, so results are bitwise reproducible run to run (no atomics).
//
// Included only by runtime/cuda/*.cu. The caller provides the workspace
// (ColumnReduceWorkspaceFloats floats of device memory) and the stream.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cuda_check.h"

namespace sy::cuda {

inline constexpr int kColumnTileX = 32;  // columns per block (one warp wide: coalesced rows)
inline constexpr int kColumnTileY = 8;   // row lanes per block
inline constexpr int64_t kColumnMaxChunks = 256;

inline int64_t ColumnReduceChunks(int64_t rows) {
  return std::clamp<int64_t>((rows + 255) / 256, 1, kColumnMaxChunks);
}

inline int64_t ColumnReduceWorkspaceFloats(int64_t rows, int64_t cols) {
  return ColumnReduceChunks(rows) * cols;
}

// `load(r, c)` gives the value of row r, column c. kMax folds with fmaxf, otherwise sums.
template <typename Load>
__global__ void ColumnPartialKernel(Load load, int64_t rows, int64_t cols, int64_t rows_per_chunk,
                                    bool is_max, float* partial) {
  __shared__ float tile[kColumnTileY][kColumnTileX + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColumnTileX + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t r_begin = chunk * rows_per_chunk;
  const int64_t r_end = MinI64(rows, r_begin + rows_per_chunk);
  const float identity = is_max ? -INFINITY : 0.0f;
  float acc = identity;
  if (c < cols) {
    for (int64_t r = r_begin + threadIdx.y; r < r_end; r += kColumnTileY) {
      float v = load(r, c);
      acc = is_max ? fmaxf(acc, v) : acc + v;
    }
  }
  tile[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = identity;
    for (int y = 0; y < kColumnTileY; ++y) {
      total = is_max ? fmaxf(total, tile[y][threadIdx.x]) : total + tile[y][threadIdx.x];
    }
    partial[chunk * cols + c] = total;
  }
}

// out[c] = scale * fold(partial[:, c]). A template only so that every including file may define it.
template <typename T = float>
__global__ void ColumnFinishKernel(const T* partial, int64_t chunks, int64_t cols, bool is_max,
                                   T scale, T* out) {
  for (int64_t c = GlobalThreadIndex(); c < cols; c += GlobalThreadCount()) {
    T total = is_max ? -INFINITY : 0.0f;
    for (int64_t k = 0; k < chunks; ++k) {
      T v = partial[k * cols + c];
      total = is_max ? fmaxf(total, v) : total + v;
    }
    out[c] = total * scale;
  }
}

template <typename Load>
void LaunchColumnReduce(Load load, int64_t rows, int64_t cols, bool is_max, float scale,
                        float* workspace, float* out, cudaStream_t stream) {
  if (cols <= 0) return;
  const int64_t chunks = ColumnReduceChunks(rows);
  const int64_t rows_per_chunk = std::max<int64_t>(1, (rows + chunks - 1) / chunks);
  dim3 block(kColumnTileX, kColumnTileY);
  dim3 grid(static_cast<unsigned int>((cols + kColumnTileX - 1) / kColumnTileX),
            static_cast<unsigned int>(chunks));
  ColumnPartialKernel<<<grid, block, 0, stream>>>(load, rows, cols, rows_per_chunk, is_max,
                                                  workspace);
  SY_CUDA_CHECK_LAUNCH();
  ColumnFinishKernel<<<GridStrideBlocks(cols, kElementwiseThreads), kElementwiseThreads, 0,
                       stream>>>(static_cast<const float*>(workspace), chunks, cols, is_max, scale,
                                 out);
  SY_CUDA_CHECK_LAUNCH();
}

}  // namespace sy::cuda
