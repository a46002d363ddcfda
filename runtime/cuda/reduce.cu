#include "runtime/cuda/reduce.cuh"

#include "runtime/cuda/column_reduce.cuh"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cuda_check.h"

namespace sy::cuda {
namespace {

constexpr int kMaxRowThreads = 512;

__global__ void ReduceRowsKernel(const float* x, int64_t cols, ReduceKind kind, float* out) {
  __shared__ float scratch[32];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * cols;
  float result;
  if (kind == ReduceKind::kMax) {
    float acc = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) acc = fmaxf(acc, row[c]);
    result = BlockMax(acc, scratch);
  } else {
    float acc = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      float v = row[c];
      acc += kind == ReduceKind::kSumSquares ? v * v : v;
    }
    result = BlockSum(acc, scratch);
    if (kind == ReduceKind::kMean) result /= static_cast<float>(cols);
  }
  if (threadIdx.x == 0) out[blockIdx.x] = result;
}

struct MatrixLoad {
  const float* x;
  int64_t cols;
  bool square;
  __device__ float operator()(int64_t r, int64_t c) const {
    float v = x[r * cols + c];
    return square ? v * v : v;
  }
};

__global__ void SoftmaxKernel(const float* x, int64_t cols, float* out) {
  __shared__ float scratch[32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * cols;
  const float* row = x + offset;
  float* out_row = out + offset;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
  m = BlockMax(m, scratch);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(row[c] - m);
  sum = BlockSum(sum, scratch);
  const float inv = 1.0f / sum;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out_row[c] = expf(row[c] - m) * inv;
}

__global__ void SoftmaxBackwardKernel(const float* y, const float* dy, int64_t cols, float* dx) {
  __shared__ float scratch[32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * cols;
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dot += dy[offset + c] * y[offset + c];
  dot = BlockSum(dot, scratch);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    dx[offset + c] = y[offset + c] * (dy[offset + c] - dot);
  }
}

__global__ void CrossEntropyKernel(const float* logits, const int32_t* targets, int64_t cols,
                                   float* losses, float* lse) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const float* row = logits + r * cols;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
  m = BlockMax(m, scratch);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(row[c] - m);
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) {
    const float row_lse = m + logf(sum);
    const int32_t t = targets[r];
    float loss;
    if (t == -1) {
      loss = 0.0f;
    } else if (t < 0 || t >= cols) {
      loss = NAN;  // an out-of-range target: poison the loss rather than read out of bounds
    } else {
      loss = row_lse - row[t];
    }
    losses[r] = loss;
    if (lse != nullptr) lse[r] = row_lse;
  }
}

__global__ void CrossEntropyBackwardKernel(const float* logits, const int32_t* targets,
                                           const float* lse, const float* dlosses, int64_t cols,
                                           float* dlogits) {
  const int64_t r = blockIdx.x;
  const float* row = logits + r * cols;
  float* drow = dlogits + r * cols;
  const int32_t t = targets[r];
  if (t == -1) {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) drow[c] = 0.0f;
    return;
  }
  const float g = dlosses[r];
  const float row_lse = lse[r];
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float p = expf(row[c] - row_lse);
    drow[c] = g * (p - (c == t ? 1.0f : 0.0f));
  }
}

}  // namespace

void LaunchReduceRows(const float* x, int64_t rows, int64_t cols, ReduceKind kind, float* out,
                      cudaStream_t stream) {
  if (rows <= 0) return;
  ReduceRowsKernel<<<static_cast<unsigned int>(rows), RowThreads(cols, kMaxRowThreads), 0,
                     stream>>>(x, cols, kind, out);
  SY_CUDA_CHECK_LAUNCH();
}

int64_t ReduceColumnsWorkspaceFloats(int64_t rows, int64_t cols) {
  return ColumnReduceWorkspaceFloats(rows, cols);
}

void LaunchReduceColumns(const float* x, int64_t rows, int64_t cols, ReduceKind kind,
                         float* workspace, float* out, cudaStream_t stream) {
  const float scale = kind == ReduceKind::kMean ? 1.0f / static_cast<float>(rows) : 1.0f;
  LaunchColumnReduce(MatrixLoad{x, cols, kind == ReduceKind::kSumSquares}, rows, cols,
                     kind == ReduceKind::kMax, scale, workspace, out, stream);
}

void LaunchSoftmax(const float* x, int64_t rows, int64_t cols, float* out, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  SoftmaxKernel<<<static_cast<unsigned int>(rows), RowThreads(cols, kMaxRowThreads), 0, stream>>>(
      x, cols, out);
  SY_CUDA_CHECK_LAUNCH();
}

void LaunchSoftmaxBackward(const float* y, const float* dy, int64_t rows, int64_t cols, float* dx,
                           cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  SoftmaxBackwardKernel<<<static_cast<unsigned int>(rows), RowThreads(cols, kMaxRowThreads), 0,
                          stream>>>(y, dy, cols, dx);
  SY_CUDA_CHECK_LAUNCH();
}

void LaunchCrossEntropy(const float* logits, const int32_t* targets, int64_t rows, int64_t cols,
                        float* losses, float* lse, cudaStream_t stream) {
  if (rows <= 0) return;
  CrossEntropyKernel<<<static_cast<unsigned int>(rows), RowThreads(cols, kMaxRowThreads), 0,
                       stream>>>(logits, targets, cols, losses, lse);
  SY_CUDA_CHECK_LAUNCH();
}

void LaunchCrossEntropyBackward(const float* logits, const int32_t* targets, const float* lse,
                                const float* dlosses, int64_t rows, int64_t cols, float* dlogits,
                                cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  CrossEntropyBackwardKernel<<<static_cast<unsigned int>(rows), RowThreads(cols, kMaxRowThreads), 0,
                               stream>>>(logits, targets, lse, dlosses, cols, dlogits);
  SY_CUDA_CHECK_LAUNCH();
}

}  // namespace sy::cuda
