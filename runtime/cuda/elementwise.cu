#include "runtime/cuda/elementwise.cuh"

#include <type_traits>

#include "runtime/core/check.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cuda_check.h"

namespace sy::cuda {
namespace {

// One grid-stride kernel for every elementwise op: `f(i)` handles element i.
template <typename F>
__global__ void MapKernel(int64_t n, F f) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) f(i);
}

template <typename F>
void Map(int64_t n, F f, cudaStream_t stream) {
  if (n <= 0) return;
  MapKernel<<<GridStrideBlocks(n, kElementwiseThreads), kElementwiseThreads, 0, stream>>>(n, f);
  SY_CUDA_CHECK_LAUNCH();
}

template <typename T>
struct FillOp {
  T* out;
  T value;
  __device__ void operator()(int64_t i) const { out[i] = value; }
};

template <typename S, typename D>
struct ConvertOp {
  const S* src;
  D* out;
  __device__ void operator()(int64_t i) const { out[i] = FromF32<D>(ToF32(src[i])); }
};

struct BinaryFn {
  BinaryOp op;
  const float* a;
  const float* b;
  float* out;
  __device__ void operator()(int64_t i) const {
    out[i] = op == BinaryOp::kAdd ? a[i] + b[i] : a[i] * b[i];
  }
};

struct ScaleOp {
  const float* x;
  float alpha;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = alpha * x[i]; }
};

struct BetaScaleOp {
  float* c;
  float beta;
  __device__ void operator()(int64_t i) const { c[i] = beta == 0.0f ? 0.0f : beta * c[i]; }
};

struct AxpyOp {
  float alpha;
  const float* x;
  float* y;
  __device__ void operator()(int64_t i) const { y[i] += alpha * x[i]; }
};

struct AddBiasOp {
  const float* x;
  const float* bias;
  float* out;
  int64_t cols;
  __device__ void operator()(int64_t i) const { out[i] = x[i] + bias[i % cols]; }
};

__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// 1/sqrt(2) and 1/sqrt(2*pi).
constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

struct ActivationOp {
  Activation act;
  const float* x;
  float* out;
  __device__ void operator()(int64_t i) const {
    float v = x[i];
    switch (act) {
      case Activation::kSilu:
        out[i] = v * Sigmoid(v);
        return;
      case Activation::kGelu:
        out[i] = 0.5f * v * (1.0f + erff(v * kInvSqrt2));
        return;
      case Activation::kRelu:
        out[i] = v < 0.0f ? 0.0f : v;  // a NaN stays NaN
        return;
    }
  }
};

struct ActivationBackwardOp {
  Activation act;
  const float* x;
  const float* dout;
  float* dx;
  __device__ void operator()(int64_t i) const {
    float v = x[i];
    float grad = 0.0f;
    switch (act) {
      case Activation::kSilu: {
        float s = Sigmoid(v);
        grad = s * (1.0f + v * (1.0f - s));
        break;
      }
      case Activation::kGelu:
        grad = 0.5f * (1.0f + erff(v * kInvSqrt2)) + v * kInvSqrt2Pi * expf(-0.5f * v * v);
        break;
      case Activation::kRelu:
        // Selects rather than multiplies, so an infinite or NaN dout where x <= 0 gives 0.
        dx[i] = v > 0.0f ? dout[i] : 0.0f;
        return;
    }
    dx[i] = dout[i] * grad;
  }
};

struct SwigluOp {
  const float* gate;
  const float* up;
  float* out;
  __device__ void operator()(int64_t i) const {
    float g = gate[i];
    out[i] = g * Sigmoid(g) * up[i];
  }
};

struct SwigluBackwardOp {
  const float* gate;
  const float* up;
  const float* dout;
  float* dgate;
  float* dup;
  __device__ void operator()(int64_t i) const {
    float g = gate[i];
    float u = up[i];
    float d = dout[i];
    float s = Sigmoid(g);
    dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
    dup[i] = d * g * s;
  }
};

struct SplitBf16x3Op {
  const float* a;
  int64_t inner;
  __nv_bfloat16* pieces;
  __device__ void operator()(int64_t i) const {
    const int64_t o = i / inner;
    const int64_t j = i % inner;
    const float x = a[i];
    const __nv_bfloat16 hi = __float2bfloat16_rn(x);
    __nv_bfloat16 mid = __float2bfloat16_rn(0.0f);
    __nv_bfloat16 lo = mid;
    if (isfinite(x)) {
      const float r1 = x - __bfloat162float(hi);  // exact: x and hi agree in their top bits
      mid = __float2bfloat16_rn(r1);
      lo = __float2bfloat16_rn(r1 - __bfloat162float(mid));
    }
    __nv_bfloat16* out = pieces + o * 3 * inner + j;
    out[0] = hi;
    out[inner] = mid;
    out[2 * inner] = lo;
  }
};

struct CombineSplitOp {
  const float* t;
  int64_t m;
  int64_t n;
  int64_t row_stride;
  int64_t piece_stride;
  float alpha;
  float beta;
  float* c;
  __device__ void operator()(int64_t index) const {
    const int64_t j = index % n;
    const int64_t i = (index / n) % m;
    const int64_t b = index / (m * n);
    const float* tb = t + b * 3 * m * n + j;
    const float t0 = tb[(i * row_stride) * n];
    const float t1 = tb[(i * row_stride + piece_stride) * n];
    const float t2 = tb[(i * row_stride + 2 * piece_stride) * n];
    const float sum = (t2 + t1) + t0;  // smallest first
    c[index] = alpha * sum + (beta == 0.0f ? 0.0f : beta * c[index]);
  }
};

template <typename T>
void FillAs(void* out, uint64_t bits, int64_t n, cudaStream_t stream) {
  Map(n, FillOp<T>{static_cast<T*>(out), static_cast<T>(bits)}, stream);
}

size_t FloatTypeSize(FloatType type) {
  switch (type) {
    case FloatType::kF32:
      return 4;
    case FloatType::kBF16:
    case FloatType::kF16:
      return 2;
  }
  return 0;
}

}  // namespace

void LaunchFill(void* out, int element_bytes, uint64_t bits, int64_t n, cudaStream_t stream) {
  switch (element_bytes) {
    case 1:
      FillAs<uint8_t>(out, bits, n, stream);
      return;
    case 2:
      FillAs<uint16_t>(out, bits, n, stream);
      return;
    case 4:
      FillAs<uint32_t>(out, bits, n, stream);
      return;
    case 8:
      FillAs<uint64_t>(out, bits, n, stream);
      return;
    default:
      SY_CHECK(false) << "Fill of " << element_bytes << "-byte elements";
  }
}

void LaunchConvert(const void* src, FloatType src_type, void* out, FloatType out_type, int64_t n,
                   cudaStream_t stream) {
  if (n <= 0) return;
  if (src_type == out_type) {
    SY_CUDA_CHECK(cudaMemcpyAsync(out, src, static_cast<size_t>(n) * FloatTypeSize(src_type),
                                  cudaMemcpyDeviceToDevice, stream));
    return;
  }
  DispatchFloat(src_type, [&](auto* src_tag) {
    using S = std::remove_pointer_t<decltype(src_tag)>;
    DispatchFloat(out_type, [&](auto* out_tag) {
      using D = std::remove_pointer_t<decltype(out_tag)>;
      Map(n, ConvertOp<S, D>{static_cast<const S*>(src), static_cast<D*>(out)}, stream);
    });
  });
}

void LaunchSplitBf16x3(const float* a, int64_t outer, int64_t inner, void* pieces,
                       cudaStream_t stream) {
  if (inner <= 0) return;
  Map(outer * inner, SplitBf16x3Op{a, inner, static_cast<__nv_bfloat16*>(pieces)}, stream);
}

void LaunchCombineSplit(const float* t, int64_t batch, int64_t m, int64_t n, int64_t row_stride,
                        int64_t piece_stride, float alpha, float beta, float* c,
                        cudaStream_t stream) {
  if (m <= 0 || n <= 0) return;
  Map(batch * m * n, CombineSplitOp{t, m, n, row_stride, piece_stride, alpha, beta, c}, stream);
}

void LaunchBinary(BinaryOp op, const float* a, const float* b, float* out, int64_t n,
                  cudaStream_t stream) {
  Map(n, BinaryFn{op, a, b, out}, stream);
}

void LaunchScale(const float* x, float alpha, float* out, int64_t n, cudaStream_t stream) {
  Map(n, ScaleOp{x, alpha, out}, stream);
}

void LaunchBetaScale(float* c, float beta, int64_t n, cudaStream_t stream) {
  if (beta == 1.0f) return;
  Map(n, BetaScaleOp{c, beta}, stream);
}

void LaunchAxpy(float alpha, const float* x, float* y, int64_t n, cudaStream_t stream) {
  Map(n, AxpyOp{alpha, x, y}, stream);
}

void LaunchAddBias(const float* x, const float* bias, float* out, int64_t rows, int64_t cols,
                   cudaStream_t stream) {
  if (cols <= 0) return;
  Map(rows * cols, AddBiasOp{x, bias, out, cols}, stream);
}

void LaunchActivation(Activation act, const float* x, float* out, int64_t n, cudaStream_t stream) {
  Map(n, ActivationOp{act, x, out}, stream);
}

void LaunchActivationBackward(Activation act, const float* x, const float* dout, float* dx,
                              int64_t n, cudaStream_t stream) {
  Map(n, ActivationBackwardOp{act, x, dout, dx}, stream);
}

void LaunchSwiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  Map(n, SwigluOp{gate, up, out}, stream);
}

void LaunchSwigluBackward(const float* gate, const float* up, const float* dout, float* dgate,
                          float* dup, int64_t n, cudaStream_t stream) {
  Map(n, SwigluBackwardOp{gate, up, dout, dgate, dup}, stream);
}

}  // namespace sy::cuda
