#include "runtime/cuda/index.cuh"

#include <type_traits>

#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cuda_check.h"

namespace sy::cuda {
namespace {

// Blocks cover rows (grid-stride past the grid limit); threads cover the columns of a row, so
// every row access is coalesced.
constexpr unsigned int kMaxRowBlocks = 65535u * 16u;

unsigned int RowBlocks(int64_t rows) {
  return static_cast<unsigned int>(std::min<int64_t>(rows, kMaxRowBlocks));
}

template <typename T>
__global__ void GatherKernel(const T* src, int64_t src_rows, const int32_t* indices, int64_t rows,
                             int64_t cols, float* out) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t index = indices[r];
    float* out_row = out + r * cols;
    if (index < 0 || index >= src_rows) {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out_row[c] = NAN;
      continue;
    }
    const T* src_row = src + index * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out_row[c] = ToF32(src_row[c]);
  }
}

__global__ void ScatterAddKernel(const float* src, const int32_t* indices, const float* weights,
                                 int64_t rows, int64_t cols, float* out, int64_t out_rows) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t index = indices[r];
    if (index < 0 || index >= out_rows) continue;
    const float w = weights != nullptr ? weights[r] : 1.0f;
    const float* src_row = src + r * cols;
    float* out_row = out + index * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) atomicAdd(&out_row[c], w * src_row[c]);
  }
}

template <typename T>
void Gather(const T* src, int64_t src_rows, const int32_t* indices, int64_t rows, int64_t cols,
            float* out, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  GatherKernel<T><<<RowBlocks(rows), RowThreads(cols, 256), 0, stream>>>(src, src_rows, indices,
                                                                         rows, cols, out);
  SY_CUDA_CHECK_LAUNCH();
}

void ScatterAdd(const float* src, const int32_t* indices, const float* weights, int64_t rows,
                int64_t cols, float* out, int64_t out_rows, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  ScatterAddKernel<<<RowBlocks(rows), RowThreads(cols, 256), 0, stream>>>(
      src, indices, weights, rows, cols, out, out_rows);
  SY_CUDA_CHECK_LAUNCH();
}

}  // namespace

void LaunchEmbeddingGather(const void* table, FloatType table_type, int64_t vocab,
                           const int32_t* ids, int64_t n, int64_t cols, float* out,
                           cudaStream_t stream) {
  DispatchFloat(table_type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    Gather(static_cast<const T*>(table), vocab, ids, n, cols, out, stream);
  });
}

void LaunchEmbeddingScatterAdd(const float* dout, const int32_t* ids, int64_t n, int64_t cols,
                               float* dtable, int64_t vocab, cudaStream_t stream) {
  ScatterAdd(dout, ids, nullptr, n, cols, dtable, vocab, stream);
}

void LaunchGatherRows(const float* src, int64_t n, const int32_t* indices, int64_t m, int64_t cols,
                      float* out, cudaStream_t stream) {
  Gather(src, n, indices, m, cols, out, stream);
}

void LaunchScatterAddRows(const float* src, const int32_t* indices, const float* weights, int64_t m,
                          int64_t cols, float* out, int64_t n, cudaStream_t stream) {
  ScatterAdd(src, indices, weights, m, cols, out, n, stream);
}

}  // namespace sy::cuda
