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
#include <type_traits>

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

// ---- runtime-typed operands (Note [16-bit operands]) ----
//
// Kernels that take operands of independent dtypes read and write them through these accessors,
// instantiated twice: Reader<true>/Writer<true> are plain f32 pointers (the all-f32 launch, whose
// arithmetic is that of the original kernels), Reader<false>/Writer<false> switch on the element
// type at each access. The type is a kernel argument, the same for every thread, so the switch
// never diverges within a warp. Loads are exact; a store rounds once to nearest even.

__device__ __forceinline__ float LoadAs(const void* p, FloatType type, int64_t i) {
  switch (type) {
    case FloatType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case FloatType::kF16:
      return __half2float(static_cast<const __half*>(p)[i]);
    case FloatType::kF32:
      break;
  }
  return static_cast<const float*>(p)[i];
}

__device__ __forceinline__ void StoreAs(void* p, FloatType type, int64_t i, float v) {
  switch (type) {
    case FloatType::kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      return;
    case FloatType::kF16:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      return;
    case FloatType::kF32:
      break;
  }
  static_cast<float*>(p)[i] = v;
}

struct F32Reader {
  const float* p;
  __device__ __forceinline__ float operator[](int64_t i) const { return p[i]; }
};
struct AnyReader {
  const void* p;
  FloatType type;
  __device__ __forceinline__ float operator[](int64_t i) const { return LoadAs(p, type, i); }
};
struct F32Writer {
  float* p;
  __device__ __forceinline__ float Load(int64_t i) const { return p[i]; }
  __device__ __forceinline__ void Store(int64_t i, float v) const { p[i] = v; }
};
struct AnyWriter {
  void* p;
  FloatType type;
  __device__ __forceinline__ float Load(int64_t i) const { return LoadAs(p, type, i); }
  __device__ __forceinline__ void Store(int64_t i, float v) const { StoreAs(p, type, i, v); }
};

template <bool kF32>
using Reader = std::conditional_t<kF32, F32Reader, AnyReader>;
template <bool kF32>
using Writer = std::conditional_t<kF32, F32Writer, AnyWriter>;

// Host side: the accessor of an operand for a kernel instantiated with kF32 (where kF32, the
// operand is f32: the launcher checked with AllF32).
template <bool kF32>
Reader<kF32> MakeReader(FloatIn in) {
  if constexpr (kF32) {
    return F32Reader{static_cast<const float*>(in.data)};
  } else {
    return AnyReader{in.data, in.type};
  }
}
template <bool kF32>
Writer<kF32> MakeWriter(FloatOut out) {
  if constexpr (kF32) {
    return F32Writer{static_cast<float*>(out.data)};
  } else {
    return AnyWriter{out.data, out.type};
  }
}

// Calls f(std::true_type{}) when all_f32 (AllF32 of the launch's operands), else
// f(std::false_type{}): the lambda instantiates its kernel with decltype(tag)::value.
template <typename F>
void DispatchAllF32(bool all_f32, F&& f) {
  if (all_f32) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
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
