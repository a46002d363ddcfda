// The kernels of optim/cuda/grad_norm_cuda.h.
#include <cuda_runtime.h>

#include <cstdint>

#include "optim/cuda/grad_norm_cuda.h"
#include "runtime/core/check.h"
#include "runtime/core/vendor_check.h"

#define SY_OPTIM_CUDA_CHECK(expr) SY_VENDOR_CHECK_GEN(expr, cudaSuccess, cudaGetErrorString, "CUDA")

namespace sy {
namespace {

constexpr int kThreads = 256;

// One block per partial: a grid-stride sum in double per thread, then a tree over the block in
// shared memory (a fixed order, so the partial is the same every run).
__global__ void SquaredNormPartialsKernel(const float* __restrict__ x, int64_t n,
                                          double* __restrict__ partials) {
  __shared__ double sums[kThreads];
  double sum = 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const double v = static_cast<double>(x[i]);
    sum = __fma_rn(v, v, sum);
  }
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sums[0];
}

__global__ void ScaleInPlaceKernel(float* __restrict__ x, int64_t n, float factor) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    x[i] = __fmul_rn(x[i], factor);
  }
}

}  // namespace

void LaunchSquaredNormPartialsCuda(const float* x, size_t n, double* partials, void* stream) {
  SquaredNormPartialsKernel<<<kSquaredNormPartials, kThreads, 0,
                              static_cast<cudaStream_t>(stream)>>>(x, static_cast<int64_t>(n),
                                                                   partials);
  SY_OPTIM_CUDA_CHECK(cudaGetLastError());
}

void LaunchScaleInPlaceCuda(float* x, size_t n, float factor, void* stream) {
  if (n == 0) return;
  const int64_t blocks = (static_cast<int64_t>(n) + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(blocks < 65535 * 8 ? blocks : 65535 * 8);
  ScaleInPlaceKernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, static_cast<int64_t>(n), factor);
  SY_OPTIM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace sy
