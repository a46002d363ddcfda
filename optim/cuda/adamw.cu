#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "optim/cuda/adamw_cuda.h"
#include "runtime/core/check.h"
#include "runtime/core/vendor_check.h"

#define SY_OPTIM_CUDA_CHECK(expr) SY_VENDOR_CHECK_GEN(expr, cudaSuccess, cudaGetErrorString, "CUDA")

namespace sy {
namespace {

constexpr int kThreads = 256;

// Round to nearest even with NaN quieted: the bit logic of F32ToBF16 (runtime/core/dtype.h).
__device__ __forceinline__ uint16_t RoundToBF16(float f) {
  uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);
}

// The bit logic of F32ToF16 (runtime/core/dtype.h), including subnormals and NaN.
__device__ __forceinline__ uint16_t RoundToF16(float f) {
  uint32_t x = __float_as_uint(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t magnitude = x & 0x7fffffffu;
  uint16_t out;
  if (magnitude >= (143u << 23)) {
    out = magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (magnitude < (113u << 23)) {
    float aligned = __fadd_rn(__uint_as_float(magnitude), 0.5f);
    out = static_cast<uint16_t>(__float_as_uint(aligned) - __float_as_uint(0.5f));
  } else {
    uint32_t odd = (magnitude >> 13) & 1u;
    magnitude += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + odd;
    out = static_cast<uint16_t>(magnitude >> 13);
  }
  return static_cast<uint16_t>(out | sign);
}

enum class CopyKind { kNone, kBF16, kF16 };

template <CopyKind kCopy>
__global__ void AdamUpdateKernel(AdamStepScalars s, float* __restrict__ param,
                                 const float* __restrict__ grad, float* __restrict__ m,
                                 float* __restrict__ v, uint16_t* __restrict__ copy, int64_t n) {
  const bool l2 = s.l2 != 0.0f;
  const bool decay = s.decay_factor != 1.0f;
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float g = grad[i];
    float p = param[i];
    if (l2) g = __fmaf_rn(p, s.l2, g);
    if (decay) p = __fmul_rn(p, s.decay_factor);
    float mi = __fmaf_rn(g, s.one_minus_beta1, __fmul_rn(m[i], s.beta1));
    float vi = __fmaf_rn(__fmul_rn(s.one_minus_beta2, g), g, __fmul_rn(v[i], s.beta2));
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bias_correction2_sqrt), s.eps);
    p = __fadd_rn(p, __fdiv_rn(__fmul_rn(s.neg_step_size, mi), denom));
    m[i] = mi;
    v[i] = vi;
    param[i] = p;
    if constexpr (kCopy == CopyKind::kBF16) copy[i] = RoundToBF16(p);
    if constexpr (kCopy == CopyKind::kF16) copy[i] = RoundToF16(p);
  }
}

}  // namespace

void LaunchAdamUpdateCuda(const AdamStepScalars& scalars, float* param, const float* grad, float* m,
                          float* v, size_t n, void* compute_copy, DType compute_dtype,
                          void* stream) {
  if (n == 0) return;
  SY_CHECK(compute_copy == nullptr || compute_dtype == DType::kBF16 || compute_dtype == DType::kF16)
      << "compute copy dtype " << DTypeName(compute_dtype) << " is not bf16 or f16";
  int64_t count = static_cast<int64_t>(n);
  // Enough blocks to fill the device; the grid-stride loop covers the rest.
  unsigned int blocks =
      static_cast<unsigned int>(std::clamp<int64_t>((count + kThreads - 1) / kThreads, 1, 65536));
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  auto* copy = static_cast<uint16_t*>(compute_copy);
  if (copy == nullptr) {
    AdamUpdateKernel<CopyKind::kNone>
        <<<blocks, kThreads, 0, cuda_stream>>>(scalars, param, grad, m, v, nullptr, count);
  } else if (compute_dtype == DType::kBF16) {
    AdamUpdateKernel<CopyKind::kBF16>
        <<<blocks, kThreads, 0, cuda_stream>>>(scalars, param, grad, m, v, copy, count);
  } else {
    AdamUpdateKernel<CopyKind::kF16>
        <<<blocks, kThreads, 0, cuda_stream>>>(scalars, param, grad, m, v, copy, count);
  }
  SY_OPTIM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace sy
