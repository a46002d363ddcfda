// Device-side helpers shared by the CUDA backend's kernels: dtype loads and stores, warp and block
// reductions, and launch-shape arithmetic.
//
// Included only by runtime/cuda/*.cu. Block reductions require blockDim.x to be a multiple of 32
// (at most 1024) and must be reached by every thread of the block (they contain __syncthreads).
// Thread-safety: stateless.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "runtime/cuda/kernel_types.h"

namespace sy::cuda {

// Threads per block for elementwise grid-stride kernels.
inline constexpr int kElementwiseThreads = 256;

// Blocks for a grid-stride loop over n items: enough to fill the GPU, capped so the grid stays a
// legal size; the loop covers whatever the grid does not.
inline unsigned int GridStrideBlocks(int64_t n, int threads) {
  int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned int>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 20));
}

// Threads for one block per row of length n: the next multiple of 32 at or above n, capped.
inline int RowThreads(int64_t n, int max_threads = 256) {
  int64_t threads = (n + 31) / 32 * 32;
  return static_cast<int>(std::clamp<int64_t>(threads, 32, max_threads));
}

__device__ __forceinline__ int64_t GlobalThreadIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GlobalThreadCount() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

__device__ __forceinline__ int64_t MinI64(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t MaxI64(int64_t a, int64_t b) { return a > b ? a : b; }

// ---- dtype loads and stores (round to nearest even on the way down) ----

__device__ __forceinline__ float ToF32(float x) { return x; }
__device__ __forceinline__ float ToF32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ToF32(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T FromF32(float x);
template <>
__device__ __forceinline__ float FromF32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromF32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half FromF32<__half>(float x) {
  return __float2half_rn(x);
}

// Calls f(static_cast<T*>(nullptr)) with T the device type of `type`: a tag to dispatch on.
template <typename F>
void DispatchFloat(FloatType type, F&& f) {
  switch (type) {
    case FloatType::kF32:
      f(static_cast<float*>(nullptr));
      return;
    case FloatType::kBF16:
      f(static_cast<__nv_bfloat16*>(nullptr));
      return;
    case FloatType::kF16:
      f(static_cast<__half*>(nullptr));
      return;
  }
}

// ---- reductions ----

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

__device__ __forceinline__ unsigned long long WarpMaxU64(unsigned long long v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    unsigned long long other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = other > v ? other : v;
  }
  return v;
}

// Reduces v over the block with `warp_op` (a warp-wide reduction) and returns the result to every
// thread. `scratch` holds 32 values in shared memory; the leading barrier lets one scratch array
// serve consecutive reductions.
template <typename T, typename WarpOp>
__device__ __forceinline__ T BlockReduce(T v, T identity, T* scratch, WarpOp warp_op) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int num_warps = blockDim.x >> 5;
  v = warp_op(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < num_warps ? scratch[lane] : identity;
    w = warp_op(w);
    if (lane == 0) scratch[0] = w;
  }
  __syncthreads();
  return scratch[0];
}

__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  return BlockReduce(v, 0.0f, scratch, [](float x) { return WarpSum(x); });
}

__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  return BlockReduce(v, -INFINITY, scratch, [](float x) { return WarpMax(x); });
}

__device__ __forceinline__ unsigned long long BlockMaxU64(unsigned long long v,
                                                          unsigned long long* scratch) {
  return BlockReduce(v, 0ull, scratch, [](unsigned long long x) { return WarpMaxU64(x); });
}

}  // namespace sy::cuda
