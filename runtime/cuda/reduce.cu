#include "runtime/cuda/reduce.cuh"

#include "runtime/cuda/column_reduce.cuh"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cuda_check.h"

namespace sy::cuda {
namespace {

constexpr int kMaxRowThreads = 512;

// The kernels are templates on kF32: their float operands are f32 pointers (the original
// kernels) or runtime-typed accessors (common.cuh).
template <bool kF32>
__global__ void ReduceRowsKernel(Reader<kF32> x, int64_t cols, ReduceKind kind, Writer<kF32> out) {
  __shared__ float scratch[32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * cols;
  float result;
  if (kind == ReduceKind::kMax) {
    float acc = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) acc = fmaxf(acc, x[offset + c]);
    result = BlockMax(acc, scratch);
  } else {
    float acc = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      float v = x[offset + c];
      acc += kind == ReduceKind::kSumSquares ? v * v : v;
    }
    result = BlockSum(acc, scratch);
    if (kind == ReduceKind::kMean) result /= static_cast<float>(cols);
  }
  if (threadIdx.x == 0) out.Store(blockIdx.x, result);
}

template <bool kF32>
struct MatrixLoad {
  Reader<kF32> x;
  int64_t cols;
  bool square;
  __device__ float operator()(int64_t r, int64_t c) const {
    float v = x[r * cols + c];
    return square ? v * v : v;
  }
};

template <bool kF32>
__global__ void SoftmaxKernel(Reader<kF32> x, int64_t cols, Writer<kF32> out) {
  __shared__ float scratch[32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * cols;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, x[offset + c]);
  m = BlockMax(m, scratch);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(x[offset + c] - m);
  sum = BlockSum(sum, scratch);
  const float inv = 1.0f / sum;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    out.Store(offset + c, expf(x[offset + c] - m) * inv);
  }
}

template <bool kF32>
__global__ void SoftmaxBackwardKernel(Reader<kF32> y, Reader<kF32> dy, int64_t cols,
                                      Writer<kF32> dx) {
  __shared__ float scratch[32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * cols;
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dot += dy[offset + c] * y[offset + c];
  dot = BlockSum(dot, scratch);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    dx.Store(offset + c, y[offset + c] * (dy[offset + c] - dot));
  }
}

template <bool kF32>
__global__ void CrossEntropyKernel(Reader<kF32> logits, const int32_t* targets, int64_t cols,
                                   float* losses, float* lse) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const int64_t offset = r * cols;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, logits[offset + c]);
  m = BlockMax(m, scratch);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(logits[offset + c] - m);
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
      loss = row_lse - logits[offset + t];
    }
    losses[r] = loss;
    if (lse != nullptr) lse[r] = row_lse;
  }
}

template <bool kF32>
__global__ void CrossEntropyBackwardKernel(Reader<kF32> logits, const int32_t* targets,
                                           const float* lse, Reader<kF32> dlosses, int64_t cols,
                                           Writer<kF32> dlogits) {
  const int64_t r = blockIdx.x;
  const int64_t offset = r * cols;
  const int32_t t = targets[r];
  if (t == -1) {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dlogits.Store(offset + c, 0.0f);
    return;
  }
  const float g = dlosses[r];
  const float row_lse = lse[r];
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float p = expf(logits[offset + c] - row_lse);
    dlogits.Store(offset + c, g * (p - (c == t ? 1.0f : 0.0f)));
  }
}

}  // namespace

// Each launcher dispatches on AllF32 of its float operands (the f32 kernel, or the runtime-typed
// one; lse, losses and workspaces are always f32).

void LaunchReduceRows(FloatIn x, int64_t rows, int64_t cols, ReduceKind kind, FloatOut out,
                      cudaStream_t stream) {
  if (rows <= 0) return;
  DispatchAllF32(AllF32({x.type, out.type}), [&](auto tag) {
    constexpr bool k = decltype(tag)::value;
    ReduceRowsKernel<k>
        <<<static_cast<unsigned int>(rows), RowThreads(cols, kMaxRowThreads), 0, stream>>>(
            MakeReader<k>(x), cols, kind, MakeWriter<k>(out));
    SY_CUDA_CHECK_LAUNCH();
  });
}

int64_t ReduceColumnsWorkspaceFloats(int64_t rows, int64_t cols) {
  return ColumnReduceWorkspaceFloats(rows, cols);
}

void LaunchReduceColumns(FloatIn x, int64_t rows, int64_t cols, ReduceKind kind, float* workspace,
                         float* out, cudaStream_t stream) {
  const float scale = kind == ReduceKind::kMean ? 1.0f / static_cast<float>(rows) : 1.0f;
  DispatchAllF32(AllF32({x.type}), [&](auto tag) {
    constexpr bool k = decltype(tag)::value;
    LaunchColumnReduce(MatrixLoad<k>{MakeReader<k>(x), cols, kind == ReduceKind::kSumSquares}, rows,
                       cols, kind == ReduceKind::kMax, scale, workspace, out, stream);
  });
}

void LaunchSoftmax(FloatIn x, int64_t rows, int64_t cols, FloatOut out, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  DispatchAllF32(AllF32({x.type, out.type}), [&](auto tag) {
    constexpr bool k = decltype(tag)::value;
    SoftmaxKernel<k>
        <<<static_cast<unsigned int>(rows), RowThreads(cols, kMaxRowThreads), 0, stream>>>(
            MakeReader<k>(x), cols, MakeWriter<k>(out));
    SY_CUDA_CHECK_LAUNCH();
  });
}

void LaunchSoftmaxBackward(FloatIn y, FloatIn dy, int64_t rows, int64_t cols, FloatOut dx,
                           cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  DispatchAllF32(AllF32({y.type, dy.type, dx.type}), [&](auto tag) {
    constexpr bool k = decltype(tag)::value;
    SoftmaxBackwardKernel<k>
        <<<static_cast<unsigned int>(rows), RowThreads(cols, kMaxRowThreads), 0, stream>>>(
            MakeReader<k>(y), MakeReader<k>(dy), cols, MakeWriter<k>(dx));
    SY_CUDA_CHECK_LAUNCH();
  });
}

void LaunchCrossEntropy(FloatIn logits, const int32_t* targets, int64_t rows, int64_t cols,
                        float* losses, float* lse, cudaStream_t stream) {
  if (rows <= 0) return;
  DispatchAllF32(AllF32({logits.type}), [&](auto tag) {
    constexpr bool k = decltype(tag)::value;
    CrossEntropyKernel<k>
        <<<static_cast<unsigned int>(rows), RowThreads(cols, kMaxRowThreads), 0, stream>>>(
            MakeReader<k>(logits), targets, cols, losses, lse);
    SY_CUDA_CHECK_LAUNCH();
  });
}

void LaunchCrossEntropyBackward(FloatIn logits, const int32_t* targets, const float* lse,
                                FloatIn dlosses, int64_t rows, int64_t cols, FloatOut dlogits,
                                cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  DispatchAllF32(AllF32({logits.type, dlosses.type, dlogits.type}), [&](auto tag) {
    constexpr bool k = decltype(tag)::value;
    CrossEntropyBackwardKernel<k>
        <<<static_cast<unsigned int>(rows), RowThreads(cols, kMaxRowThreads), 0, stream>>>(
            MakeReader<k>(logits), targets, lse, MakeReader<k>(dlosses), cols,
            MakeWriter<k>(dlogits));
    SY_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace sy::cuda
