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

// The arithmetic ops are templates on kF32: Reader<true>/Writer<true> are the f32 pointers of
// the original kernels, Reader<false>/Writer<false> the runtime-typed accessors (common.cuh).
template <bool kF32>
struct BinaryFn {
  BinaryOp op;
  Reader<kF32> a;
  Reader<kF32> b;
  Writer<kF32> out;
  __device__ void operator()(int64_t i) const {
    out.Store(i, op == BinaryOp::kAdd ? a[i] + b[i] : a[i] * b[i]);
  }
};

template <bool kF32>
struct ScaleOp {
  Reader<kF32> x;
  float alpha;
  Writer<kF32> out;
  __device__ void operator()(int64_t i) const { out.Store(i, alpha * x[i]); }
};

template <bool kF32>
struct BetaScaleOp {
  Writer<kF32> c;
  float beta;
  __device__ void operator()(int64_t i) const {
    c.Store(i, beta == 0.0f ? 0.0f : beta * c.Load(i));
  }
};

template <bool kF32>
struct AxpyOp {
  float alpha;
  Reader<kF32> x;
  Writer<kF32> y;
  __device__ void operator()(int64_t i) const { y.Store(i, y.Load(i) + alpha * x[i]); }
};

template <bool kF32>
struct AddBiasOp {
  Reader<kF32> x;
  Reader<kF32> bias;
  Writer<kF32> out;
  int64_t cols;
  __device__ void operator()(int64_t i) const { out.Store(i, x[i] + bias[i % cols]); }
};

__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// 1/sqrt(2) and 1/sqrt(2*pi).
constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

template <bool kF32>
struct ActivationOp {
  Activation act;
  Reader<kF32> x;
  Writer<kF32> out;
  __device__ void operator()(int64_t i) const {
    float v = x[i];
    switch (act) {
      case Activation::kSilu:
        out.Store(i, v * Sigmoid(v));
        return;
      case Activation::kGelu:
        out.Store(i, 0.5f * v * (1.0f + erff(v * kInvSqrt2)));
        return;
      case Activation::kRelu:
        out.Store(i, v < 0.0f ? 0.0f : v);  // a NaN stays NaN
        return;
    }
  }
};

template <bool kF32>
struct ActivationBackwardOp {
  Activation act;
  Reader<kF32> x;
  Reader<kF32> dout;
  Writer<kF32> dx;
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
        dx.Store(i, v > 0.0f ? dout[i] : 0.0f);
        return;
    }
    dx.Store(i, dout[i] * grad);
  }
};

template <bool kF32>
struct SwigluOp {
  Reader<kF32> gate;
  Reader<kF32> up;
  Writer<kF32> out;
  __device__ void operator()(int64_t i) const {
    float g = gate[i];
    out.Store(i, g * Sigmoid(g) * up[i]);
  }
};

template <bool kF32>
struct SwigluBackwardOp {
  Reader<kF32> gate;
  Reader<kF32> up;
  Reader<kF32> dout;
  Writer<kF32> dgate;
  Writer<kF32> dup;
  __device__ void operator()(int64_t i) const {
    float g = gate[i];
    float u = up[i];
    float d = dout[i];
    float s = Sigmoid(g);
    dgate.Store(i, d * u * s * (1.0f + g * (1.0f - s)));
    dup.Store(i, d * g * s);
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

// Each launcher below dispatches on AllF32 of its operands: the f32 instantiation (the original
// kernel) or the runtime-typed one.

void LaunchBinary(BinaryOp op, FloatIn a, FloatIn b, FloatOut out, int64_t n, cudaStream_t stream) {
  DispatchAllF32(AllF32({a.type, b.type, out.type}), [&](auto tag) {
    constexpr bool k = decltype(tag)::value;
    Map(n, BinaryFn<k>{op, MakeReader<k>(a), MakeReader<k>(b), MakeWriter<k>(out)}, stream);
  });
}

void LaunchScale(FloatIn x, float alpha, FloatOut out, int64_t n, cudaStream_t stream) {
  DispatchAllF32(AllF32({x.type, out.type}), [&](auto tag) {
    constexpr bool k = decltype(tag)::value;
    Map(n, ScaleOp<k>{MakeReader<k>(x), alpha, MakeWriter<k>(out)}, stream);
  });
}

void LaunchBetaScale(FloatOut c, float beta, int64_t n, cudaStream_t stream) {
  if (beta == 1.0f) return;
  DispatchAllF32(AllF32({c.type}), [&](auto tag) {
    constexpr bool k = decltype(tag)::value;
    Map(n, BetaScaleOp<k>{MakeWriter<k>(c), beta}, stream);
  });
}

void LaunchAxpy(float alpha, FloatIn x, FloatOut y, int64_t n, cudaStream_t stream) {
  DispatchAllF32(AllF32({x.type, y.type}), [&](auto tag) {
    constexpr bool k = decltype(tag)::value;
    Map(n, AxpyOp<k>{alpha, MakeReader<k>(x), MakeWriter<k>(y)}, stream);
  });
}

void LaunchAddBias(FloatIn x, FloatIn bias, FloatOut out, int64_t rows, int64_t cols,
                   cudaStream_t stream) {
  if (cols <= 0) return;
  DispatchAllF32(AllF32({x.type, bias.type, out.type}), [&](auto tag) {
    constexpr bool k = decltype(tag)::value;
    Map(rows * cols, AddBiasOp<k>{MakeReader<k>(x), MakeReader<k>(bias), MakeWriter<k>(out), cols},
        stream);
  });
}

void LaunchActivation(Activation act, FloatIn x, FloatOut out, int64_t n, cudaStream_t stream) {
  DispatchAllF32(AllF32({x.type, out.type}), [&](auto tag) {
    constexpr bool k = decltype(tag)::value;
    Map(n, ActivationOp<k>{act, MakeReader<k>(x), MakeWriter<k>(out)}, stream);
  });
}

void LaunchActivationBackward(Activation act, FloatIn x, FloatIn dout, FloatOut dx, int64_t n,
                              cudaStream_t stream) {
  DispatchAllF32(AllF32({x.type, dout.type, dx.type}), [&](auto tag) {
    constexpr bool k = decltype(tag)::value;
    Map(n, ActivationBackwardOp<k>{act, MakeReader<k>(x), MakeReader<k>(dout), MakeWriter<k>(dx)},
        stream);
  });
}

void LaunchSwiglu(FloatIn gate, FloatIn up, FloatOut out, int64_t n, cudaStream_t stream) {
  DispatchAllF32(AllF32({gate.type, up.type, out.type}), [&](auto tag) {
    constexpr bool k = decltype(tag)::value;
    Map(n, SwigluOp<k>{MakeReader<k>(gate), MakeReader<k>(up), MakeWriter<k>(out)}, stream);
  });
}

void LaunchSwigluBackward(FloatIn gate, FloatIn up, FloatIn dout, FloatOut dgate, FloatOut dup,
                          int64_t n, cudaStream_t stream) {
  DispatchAllF32(AllF32({gate.type, up.type, dout.type, dgate.type, dup.type}), [&](auto tag) {
    constexpr bool k = decltype(tag)::value;
    Map(n,
        SwigluBackwardOp<k>{MakeReader<k>(gate), MakeReader<k>(up), MakeReader<k>(dout),
                            MakeWriter<k>(dgate), MakeWriter<k>(dup)},
        stream);
  });
}

}  // namespace sy::cuda
