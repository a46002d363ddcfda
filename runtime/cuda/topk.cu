#include "runtime/cuda/topk.cuh"

#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cuda_check.h"

namespace sy::cuda {
namespace {

// A 64-bit key whose unsigned order is the selection order: the value mapped to an order-preserving
// unsigned integer in the high half (-0 folded into +0, so equal values compare equal), and the
// complement of the index in the low half (a lower index ranks higher among equal values). Every
// key is > 0, which serves as "nothing selected".
__device__ __forceinline__ unsigned long long RankKey(float value, int64_t index) {
  unsigned int bits = __float_as_uint(value == 0.0f ? 0.0f : value);
  unsigned int ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  unsigned int low = 0xffffffffu - static_cast<unsigned int>(index);
  return (static_cast<unsigned long long>(ordered) << 32) | low;
}

// kF32: x an f32 pointer (the original kernel) or runtime-typed (common.cuh).
template <bool kF32>
__global__ void TopKKernel(Reader<kF32> x, int64_t cols, int k, float* values, int32_t* indices) {
  __shared__ unsigned long long scratch[32];
  const int64_t r = blockIdx.x;
  const int64_t offset = r * cols;
  unsigned long long limit = 0;
  for (int i = 0; i < k; ++i) {
    unsigned long long best = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      unsigned long long key = RankKey(x[offset + c], c);
      if ((i == 0 || key < limit) && key > best) best = key;
    }
    best = BlockMaxU64(best, scratch);
    limit = best;
    if (threadIdx.x == 0) {
      const int64_t index = 0xffffffffu - static_cast<unsigned int>(best & 0xffffffffu);
      values[r * k + i] = x[offset + index];
      indices[r * k + i] = static_cast<int32_t>(index);
    }
  }
}

}  // namespace

void LaunchTopK(FloatIn x, int64_t rows, int64_t cols, int k, float* values, int32_t* indices,
                cudaStream_t stream) {
  if (rows <= 0 || k <= 0) return;
  // The f32 kernel, or the runtime-typed one for a 16-bit x.
  DispatchAllF32(AllF32({x.type}), [&](auto tag) {
    constexpr bool f32 = decltype(tag)::value;
    TopKKernel<f32><<<static_cast<unsigned int>(rows), RowThreads(cols, 256), 0, stream>>>(
        MakeReader<f32>(x), cols, k, values, indices);
    SY_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace sy::cuda
