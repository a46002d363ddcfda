#include "runtime/cuda/norm_rope.cuh"

#include <type_traits>

#include "runtime/cuda/column_reduce.cuh"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cuda_check.h"

namespace sy::cuda {
namespace {

constexpr int kMaxRowThreads = 512;

// The kernels are templates on the weight's type W and on kF32 (x, out, dout, dx as f32
// pointers, or runtime-typed: common.cuh).
template <typename W, bool kF32>
__global__ void RmsNormKernel(Reader<kF32> x, const W* weight, int64_t cols, float eps,
                              Writer<kF32> out, float* rstd) {
  __shared__ float scratch[32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * cols;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = x[offset + c];
    ss += v * v;
  }
  ss = BlockSum(ss, scratch);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    out.Store(offset + c, x[offset + c] * r * ToF32(weight[c]));
  }
  if (rstd != nullptr && threadIdx.x == 0) rstd[blockIdx.x] = r;
}

template <typename W, bool kF32>
__global__ void RmsNormBackwardKernel(Reader<kF32> x, const W* weight, const float* rstd,
                                      Reader<kF32> dout, int64_t cols, Writer<kF32> dx) {
  __shared__ float scratch[32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * cols;
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    dot += dout[offset + c] * ToF32(weight[c]) * x[offset + c];
  }
  dot = BlockSum(dot, scratch);
  const float r = rstd[blockIdx.x];
  const float coef = dot * r * r * r / static_cast<float>(cols);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    dx.Store(offset + c, r * dout[offset + c] * ToF32(weight[c]) - x[offset + c] * coef);
  }
}

template <bool kF32>
struct DWeightLoad {
  Reader<kF32> x;
  Reader<kF32> dout;
  const float* rstd;
  int64_t cols;
  __device__ float operator()(int64_t r, int64_t c) const {
    return dout[r * cols + c] * x[r * cols + c] * rstd[r];
  }
};

template <bool kF32>
__global__ void RopeKernel(Reader<kF32> x, const int32_t* positions, int64_t heads, int64_t dim,
                           int64_t rotary, float theta, bool backward, Writer<kF32> out) {
  extern __shared__ float table[];  // cos at [0, half), sin at [half, rotary)
  const int64_t half = rotary / 2;
  const int64_t t = blockIdx.x;
  const double position = static_cast<double>(positions[t]);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    double inv_freq = pow(static_cast<double>(theta),
                          -2.0 * static_cast<double>(i) / static_cast<double>(rotary));
    double s;
    double c;
    sincos(position * inv_freq, &s, &c);
    table[i] = static_cast<float>(c);
    table[half + i] = static_cast<float>(s);
  }
  __syncthreads();
  const int64_t base = t * heads * dim;
  for (int64_t e = threadIdx.x; e < heads * half; e += blockDim.x) {
    const int64_t h = e / half;
    const int64_t i = e % half;
    const int64_t lo = base + h * dim + i;
    const int64_t hi = lo + half;
    const float a = x[lo];
    const float b = x[hi];
    const float c = table[i];
    const float s = table[half + i];
    if (backward) {
      out.Store(lo, a * c + b * s);
      out.Store(hi, b * c - a * s);
    } else {
      out.Store(lo, a * c - b * s);
      out.Store(hi, b * c + a * s);
    }
  }
  // Partial rotary: the values past `rotary` pass through.
  const int64_t pass = dim - rotary;
  for (int64_t e = threadIdx.x; e < heads * pass; e += blockDim.x) {
    const int64_t at = base + (e / pass) * dim + rotary + e % pass;
    out.Store(at, x[at]);
  }
}

}  // namespace

// The launchers dispatch on the weight's type and on AllF32 of the other float operands (the
// original f32 kernels, or the runtime-typed instantiation).

void LaunchRmsNorm(FloatIn x, const void* weight, FloatType weight_type, int64_t rows, int64_t cols,
                   float eps, FloatOut out, float* rstd, cudaStream_t stream) {
  if (rows <= 0) return;
  DispatchFloat(weight_type, [&](auto* tag) {
    using W = std::remove_pointer_t<decltype(tag)>;
    DispatchAllF32(AllF32({x.type, out.type}), [&](auto f32_tag) {
      constexpr bool k = decltype(f32_tag)::value;
      RmsNormKernel<W, k>
          <<<static_cast<unsigned int>(rows), RowThreads(cols, kMaxRowThreads), 0, stream>>>(
              MakeReader<k>(x), static_cast<const W*>(weight), cols, eps, MakeWriter<k>(out), rstd);
      SY_CUDA_CHECK_LAUNCH();
    });
  });
}

int64_t RmsNormBackwardWorkspaceFloats(int64_t rows, int64_t cols) {
  return ColumnReduceWorkspaceFloats(rows, cols);
}

void LaunchRmsNormBackward(FloatIn x, const void* weight, FloatType weight_type, const float* rstd,
                           FloatIn dout, int64_t rows, int64_t cols, FloatOut dx, float* dweight,
                           float* workspace, cudaStream_t stream) {
  DispatchAllF32(AllF32({x.type, dout.type, dx.type}), [&](auto f32_tag) {
    constexpr bool k = decltype(f32_tag)::value;
    // dweight first: dx may alias x or dout.
    LaunchColumnReduce(DWeightLoad<k>{MakeReader<k>(x), MakeReader<k>(dout), rstd, cols}, rows,
                       cols, /*is_max=*/false, 1.0f, workspace, dweight, stream);
    if (rows <= 0) return;
    DispatchFloat(weight_type, [&](auto* tag) {
      using W = std::remove_pointer_t<decltype(tag)>;
      RmsNormBackwardKernel<W, k>
          <<<static_cast<unsigned int>(rows), RowThreads(cols, kMaxRowThreads), 0, stream>>>(
              MakeReader<k>(x), static_cast<const W*>(weight), rstd, MakeReader<k>(dout), cols,
              MakeWriter<k>(dx));
      SY_CUDA_CHECK_LAUNCH();
    });
  });
}

void LaunchRope(FloatIn x, const int32_t* positions, int64_t tokens, int64_t heads, int64_t dim,
                int64_t rotary, float theta, bool backward, FloatOut out, cudaStream_t stream) {
  if (tokens <= 0 || heads <= 0 || dim <= 0) return;
  const size_t shared_bytes = static_cast<size_t>(rotary) * sizeof(float);
  DispatchAllF32(AllF32({x.type, out.type}), [&](auto tag) {
    constexpr bool k = decltype(tag)::value;
    RopeKernel<k><<<static_cast<unsigned int>(tokens), RowThreads(heads * (dim / 2), 256),
                    shared_bytes, stream>>>(MakeReader<k>(x), positions, heads, dim, rotary, theta,
                                            backward, MakeWriter<k>(out));
    SY_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace sy::cuda
