#include "runtime/cuda/attention.cuh"

#include <algorithm>

#include "runtime/core/check.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cuda_check.h"

namespace sy::cuda {
namespace {

constexpr int kThreads = 128;  // four warps per block
constexpr int kRowTile = 16;   // query rows per block (forward, dq) or per step (dk/dv)
constexpr int kKeyTile = 32;   // keys per step (forward, dq): one per lane of a warp
constexpr int kKvTile = 16;    // keys per block (dk/dv)
constexpr size_t kDefaultSharedLimit = 48 * 1024;

static_assert(kKeyTile == 32, "the online softmax gives each lane of a warp one key");

struct KvLens {
  int32_t len[kAttentionBatchPerLaunch];
};

// kF32: the tensor operands as f32 pointers (the original kernels), or runtime-typed accessors
// (common.cuh), each operand with its own dtype; lse and delta are f32. Every kernel reads exact
// values, computes in f32, and writes each output once (rounded to nearest even when 16-bit).
template <bool kF32>
struct Args {
  Reader<kF32> q;
  Reader<kF32> k;
  Reader<kF32> v;
  Reader<kF32> out;
  const float* lse;
  Reader<kF32> dout;
  const float* delta;
  Writer<kF32> out_w;
  float* lse_w;
  Writer<kF32> dq;
  Writer<kF32> dk;
  Writer<kF32> dv;
  float* delta_w;
  int64_t batch_offset;
  int64_t T;
  int64_t S;
  int64_t Hq;
  int64_t Hkv;
  int64_t D;
  float scale;
};

template <bool kF32>
__device__ __forceinline__ int64_t QIndex(const Args<kF32>& a, int64_t b, int64_t t, int64_t h,
                                          int64_t d) {
  return ((b * a.T + t) * a.Hq + h) * a.D + d;
}
template <bool kF32>
__device__ __forceinline__ int64_t KvIndex(const Args<kF32>& a, int64_t b, int64_t j, int64_t h,
                                           int64_t d) {
  return ((b * a.S + j) * a.Hkv + h) * a.D + d;
}
template <bool kF32>
__device__ __forceinline__ int64_t RowIndex(const Args<kF32>& a, int64_t b, int64_t h, int64_t t) {
  return (b * a.Hq + h) * a.T + t;
}

// Dot product of two shared-memory rows of length D.
__device__ __forceinline__ float Dot(const float* x, const float* y, int64_t D) {
  float acc = 0.0f;
  for (int64_t d = 0; d < D; ++d) acc += x[d] * y[d];
  return acc;
}

// Rows of a block are r = t * G + g for query head h = hk * G + g; a row's query sits at position
// offset + t with offset = kv_len - T, and sees keys j <= offset + t.

template <bool kF32>
__global__ void __launch_bounds__(kThreads) AttentionForwardKernel(Args<kF32> a, KvLens lens) {
  extern __shared__ float smem[];
  const int64_t D = a.D;
  // Rows padded to P = D + 1 floats: the lanes of a warp reading different rows hit different
  // shared-memory banks.
  const int64_t P = D + 1;
  float* sQ = smem;                      // [kRowTile][P]
  float* sK = sQ + kRowTile * P;         // [kKeyTile][P]
  float* sV = sK + kKeyTile * P;         // [kKeyTile][D]
  float* sO = sV + kKeyTile * D;         // [kRowTile][D]
  float* sS = sO + kRowTile * D;         // [kRowTile][kKeyTile]
  float* sM = sS + kRowTile * kKeyTile;  // [kRowTile] running max
  float* sL = sM + kRowTile;             // [kRowTile] running sum
  float* sAlpha = sL + kRowTile;         // [kRowTile] rescale of this step

  const int64_t G = a.Hq / a.Hkv;
  const int64_t rows = a.T * G;
  const int64_t b = a.batch_offset + blockIdx.z;
  const int64_t offset = lens.len[blockIdx.z] - a.T;
  const int64_t hk = blockIdx.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRowTile;
  const int tid = threadIdx.x;

  for (int64_t e = tid; e < kRowTile * D; e += blockDim.x) {
    const int64_t qi = e / D;
    const int64_t d = e % D;
    const int64_t r = r0 + qi;
    float value = 0.0f;
    if (r < rows) value = a.q[QIndex(a, b, r / G, hk * G + r % G, d)];
    sQ[qi * P + d] = value;
    sO[e] = 0.0f;
  }
  if (tid < kRowTile) {
    sM[tid] = -INFINITY;
    sL[tid] = 0.0f;
  }
  const int64_t r_last = MinI64(r0 + kRowTile, rows) - 1;
  const int64_t key_end = offset + r_last / G + 1;  // keys any row of this tile sees

  for (int64_t j0 = 0; j0 < key_end; j0 += kKeyTile) {
    __syncthreads();  // the previous step is done with sK, sV and sS
    for (int64_t e = tid; e < kKeyTile * D; e += blockDim.x) {
      const int64_t kj = e / D;
      const int64_t d = e % D;
      const int64_t j = j0 + kj;
      float kv = 0.0f;
      float vv = 0.0f;
      if (j < key_end) {
        kv = a.k[KvIndex(a, b, j, hk, d)];
        vv = a.v[KvIndex(a, b, j, hk, d)];
      }
      sK[kj * P + d] = kv;
      sV[e] = vv;
    }
    __syncthreads();
    for (int64_t e = tid; e < kRowTile * kKeyTile; e += blockDim.x) {
      const int64_t qi = e / kKeyTile;
      const int64_t kj = e % kKeyTile;
      const int64_t r = r0 + qi;
      const int64_t j = j0 + kj;
      float s = -INFINITY;
      if (r < rows && j <= offset + r / G) s = Dot(sQ + qi * P, sK + kj * P, D) * a.scale;
      sS[e] = s;
    }
    __syncthreads();
    const int lane = tid & 31;
    for (int qi = tid >> 5; qi < kRowTile; qi += blockDim.x >> 5) {
      const float s = sS[qi * kKeyTile + lane];
      const float m_old = sM[qi];
      const float m_new = fmaxf(m_old, WarpMax(s));
      // A masked score is -inf; a row with nothing visible yet keeps m = -inf and p = 0.
      const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
      const float alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
      const float sum = WarpSum(p);
      sS[qi * kKeyTile + lane] = p;
      if (lane == 0) {
        sL[qi] = sL[qi] * alpha + sum;
        sM[qi] = m_new;
        sAlpha[qi] = alpha;
      }
    }
    __syncthreads();
    for (int64_t e = tid; e < kRowTile * D; e += blockDim.x) {
      const int64_t qi = e / D;
      const int64_t d = e % D;
      float acc = sO[e] * sAlpha[qi];
      const float* p = sS + qi * kKeyTile;
      for (int kj = 0; kj < kKeyTile; ++kj) acc += p[kj] * sV[kj * D + d];
      sO[e] = acc;
    }
  }
  __syncthreads();
  for (int64_t e = tid; e < kRowTile * D; e += blockDim.x) {
    const int64_t qi = e / D;
    const int64_t r = r0 + qi;
    if (r < rows) {
      a.out_w.Store(QIndex(a, b, r / G, hk * G + r % G, e % D), sO[e] / sL[qi]);
    }
  }
  if (a.lse_w != nullptr && tid < kRowTile && r0 + tid < rows) {
    const int64_t r = r0 + tid;
    a.lse_w[RowIndex(a, b, hk * G + r % G, r / G)] = sM[tid] + logf(sL[tid]);
  }
}

// delta[b, h, t] = sum_d dout * out, one warp per (b, t, h).
template <bool kF32>
__global__ void __launch_bounds__(kThreads) AttentionDeltaKernel(Args<kF32> a, int64_t batch) {
  const int64_t total = batch * a.T * a.Hq;
  const int lane = threadIdx.x & 31;
  const int64_t warps_per_grid = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
       row < total; row += warps_per_grid) {
    const int64_t h = row % a.Hq;
    const int64_t t = (row / a.Hq) % a.T;
    const int64_t b = row / (a.Hq * a.T);
    const int64_t base = row * a.D;  // [B, T, Hq, D] flattened: row = (b * T + t) * Hq + h
    float acc = 0.0f;
    for (int64_t d = lane; d < a.D; d += 32) acc += a.dout[base + d] * a.out[base + d];
    acc = WarpSum(acc);
    if (lane == 0) a.delta_w[RowIndex(a, b, h, t)] = acc;
  }
}

template <bool kF32>
__global__ void __launch_bounds__(kThreads) AttentionDqKernel(Args<kF32> a, KvLens lens) {
  extern __shared__ float smem[];
  const int64_t D = a.D;
  const int64_t P = D + 1;
  float* sQ = smem;                         // [kRowTile][P]
  float* sDO = sQ + kRowTile * P;           // [kRowTile][P]
  float* sK = sDO + kRowTile * P;           // [kKeyTile][P]
  float* sV = sK + kKeyTile * P;            // [kKeyTile][P]
  float* sDS = sV + kKeyTile * P;           // [kRowTile][kKeyTile]
  float* sAcc = sDS + kRowTile * kKeyTile;  // [kRowTile][D]
  float* sLse = sAcc + kRowTile * D;        // [kRowTile]
  float* sDelta = sLse + kRowTile;          // [kRowTile]

  const int64_t G = a.Hq / a.Hkv;
  const int64_t rows = a.T * G;
  const int64_t b = a.batch_offset + blockIdx.z;
  const int64_t offset = lens.len[blockIdx.z] - a.T;
  const int64_t hk = blockIdx.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRowTile;
  const int tid = threadIdx.x;

  for (int64_t e = tid; e < kRowTile * D; e += blockDim.x) {
    const int64_t qi = e / D;
    const int64_t d = e % D;
    const int64_t r = r0 + qi;
    float qv = 0.0f;
    float dov = 0.0f;
    if (r < rows) {
      const int64_t index = QIndex(a, b, r / G, hk * G + r % G, d);
      qv = a.q[index];
      dov = a.dout[index];
    }
    sQ[qi * P + d] = qv;
    sDO[qi * P + d] = dov;
    sAcc[e] = 0.0f;
  }
  if (tid < kRowTile) {
    const int64_t r = r0 + tid;
    float lse = 0.0f;
    float delta = 0.0f;
    if (r < rows) {
      const int64_t index = RowIndex(a, b, hk * G + r % G, r / G);
      lse = a.lse[index];
      delta = a.delta[index];
    }
    sLse[tid] = lse;
    sDelta[tid] = delta;
  }
  const int64_t r_last = MinI64(r0 + kRowTile, rows) - 1;
  const int64_t key_end = offset + r_last / G + 1;

  for (int64_t j0 = 0; j0 < key_end; j0 += kKeyTile) {
    __syncthreads();
    for (int64_t e = tid; e < kKeyTile * D; e += blockDim.x) {
      const int64_t kj = e / D;
      const int64_t d = e % D;
      const int64_t j = j0 + kj;
      float kv = 0.0f;
      float vv = 0.0f;
      if (j < key_end) {
        kv = a.k[KvIndex(a, b, j, hk, d)];
        vv = a.v[KvIndex(a, b, j, hk, d)];
      }
      sK[kj * P + d] = kv;
      sV[kj * P + d] = vv;
    }
    __syncthreads();
    for (int64_t e = tid; e < kRowTile * kKeyTile; e += blockDim.x) {
      const int64_t qi = e / kKeyTile;
      const int64_t kj = e % kKeyTile;
      const int64_t r = r0 + qi;
      const int64_t j = j0 + kj;
      float ds = 0.0f;
      if (r < rows && j <= offset + r / G) {
        const float p = expf(Dot(sQ + qi * P, sK + kj * P, D) * a.scale - sLse[qi]);
        const float dp = Dot(sDO + qi * P, sV + kj * P, D);
        ds = p * (dp - sDelta[qi]);
      }
      sDS[e] = ds;
    }
    __syncthreads();
    for (int64_t e = tid; e < kRowTile * D; e += blockDim.x) {
      const int64_t qi = e / D;
      const int64_t d = e % D;
      float acc = sAcc[e];
      const float* ds = sDS + qi * kKeyTile;
      for (int kj = 0; kj < kKeyTile; ++kj) acc += ds[kj] * sK[kj * P + d];
      sAcc[e] = acc;
    }
  }
  __syncthreads();
  for (int64_t e = tid; e < kRowTile * D; e += blockDim.x) {
    const int64_t qi = e / D;
    const int64_t r = r0 + qi;
    if (r < rows) a.dq.Store(QIndex(a, b, r / G, hk * G + r % G, e % D), sAcc[e] * a.scale);
  }
}

template <bool kF32>
__global__ void __launch_bounds__(kThreads) AttentionDkDvKernel(Args<kF32> a, KvLens lens) {
  extern __shared__ float smem[];
  const int64_t D = a.D;
  const int64_t P = D + 1;
  float* sK = smem;                        // [kKvTile][P]
  float* sV = sK + kKvTile * P;            // [kKvTile][P]
  float* sDK = sV + kKvTile * P;           // [kKvTile][D]
  float* sDV = sDK + kKvTile * D;          // [kKvTile][D]
  float* sQ = sDV + kKvTile * D;           // [kRowTile][P]
  float* sDO = sQ + kRowTile * P;          // [kRowTile][P]
  float* sP = sDO + kRowTile * P;          // [kRowTile][kKvTile]
  float* sDS = sP + kRowTile * kKvTile;    // [kRowTile][kKvTile]
  float* sLse = sDS + kRowTile * kKvTile;  // [kRowTile]
  float* sDelta = sLse + kRowTile;         // [kRowTile]

  const int64_t G = a.Hq / a.Hkv;
  const int64_t rows = a.T * G;
  const int64_t b = a.batch_offset + blockIdx.z;
  const int64_t kv_len = lens.len[blockIdx.z];
  const int64_t offset = kv_len - a.T;
  const int64_t hk = blockIdx.y;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kKvTile;
  const int tid = threadIdx.x;

  for (int64_t e = tid; e < kKvTile * D; e += blockDim.x) {
    const int64_t kj = e / D;
    const int64_t d = e % D;
    const int64_t j = j0 + kj;
    float kv = 0.0f;
    float vv = 0.0f;
    if (j < kv_len) {
      kv = a.k[KvIndex(a, b, j, hk, d)];
      vv = a.v[KvIndex(a, b, j, hk, d)];
    }
    sK[kj * P + d] = kv;
    sV[kj * P + d] = vv;
    sDK[e] = 0.0f;
    sDV[e] = 0.0f;
  }
  // The first row that sees key j0 is token max(0, j0 - offset) (every query head of it).
  const int64_t r_begin = j0 < kv_len ? MaxI64(0, j0 - offset) * G : rows;
  for (int64_t r0 = r_begin; r0 < rows; r0 += kRowTile) {
    __syncthreads();  // the previous step is done with sQ, sDO, sP and sDS
    for (int64_t e = tid; e < kRowTile * D; e += blockDim.x) {
      const int64_t qi = e / D;
      const int64_t d = e % D;
      const int64_t r = r0 + qi;
      float qv = 0.0f;
      float dov = 0.0f;
      if (r < rows) {
        const int64_t index = QIndex(a, b, r / G, hk * G + r % G, d);
        qv = a.q[index];
        dov = a.dout[index];
      }
      sQ[qi * P + d] = qv;
      sDO[qi * P + d] = dov;
    }
    if (tid < kRowTile) {
      const int64_t r = r0 + tid;
      float lse = 0.0f;
      float delta = 0.0f;
      if (r < rows) {
        const int64_t index = RowIndex(a, b, hk * G + r % G, r / G);
        lse = a.lse[index];
        delta = a.delta[index];
      }
      sLse[tid] = lse;
      sDelta[tid] = delta;
    }
    __syncthreads();
    for (int64_t e = tid; e < kRowTile * kKvTile; e += blockDim.x) {
      const int64_t qi = e / kKvTile;
      const int64_t kj = e % kKvTile;
      const int64_t r = r0 + qi;
      const int64_t j = j0 + kj;
      float p = 0.0f;
      float ds = 0.0f;
      if (r < rows && j < kv_len && j <= offset + r / G) {
        p = expf(Dot(sQ + qi * P, sK + kj * P, D) * a.scale - sLse[qi]);
        const float dp = Dot(sDO + qi * P, sV + kj * P, D);
        ds = p * (dp - sDelta[qi]);
      }
      sP[e] = p;
      sDS[e] = ds;
    }
    __syncthreads();
    for (int64_t e = tid; e < kKvTile * D; e += blockDim.x) {
      const int64_t kj = e / D;
      const int64_t d = e % D;
      float dv = sDV[e];
      float dk = sDK[e];
      for (int qi = 0; qi < kRowTile; ++qi) {
        dv += sP[qi * kKvTile + kj] * sDO[qi * P + d];
        dk += sDS[qi * kKvTile + kj] * sQ[qi * P + d];
      }
      sDV[e] = dv;
      sDK[e] = dk;
    }
  }
  __syncthreads();
  for (int64_t e = tid; e < kKvTile * D; e += blockDim.x) {
    const int64_t kj = e / D;
    const int64_t j = j0 + kj;
    if (j < a.S) {
      const int64_t index = KvIndex(a, b, j, hk, e % D);
      a.dk.Store(index, sDK[e] * a.scale);
      a.dv.Store(index, sDV[e]);
    }
  }
}

size_t DqSharedBytes(int64_t D) {
  const int64_t P = D + 1;
  return sizeof(float) * static_cast<size_t>(2 * kRowTile * P + 2 * kKeyTile * P +
                                             kRowTile * kKeyTile + kRowTile * D + 2 * kRowTile);
}

size_t DkDvSharedBytes(int64_t D) {
  const int64_t P = D + 1;
  return sizeof(float) * static_cast<size_t>(2 * kKvTile * P + 2 * kKvTile * D + 2 * kRowTile * P +
                                             2 * kRowTile * kKvTile + 2 * kRowTile);
}

// Raises the kernel's dynamic shared-memory limit on the current device when it needs more than
// the default 48 KiB (the caller has checked the device's opt-in limit).
template <typename Kernel>
void AllowSharedBytes(Kernel kernel, size_t bytes) {
  if (bytes > kDefaultSharedLimit) {
    SY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
  }
}

template <bool kF32>
Args<kF32> MakeArgs(const AttentionShape& shape) {
  Args<kF32> a{};
  a.T = shape.q_len;
  a.S = shape.kv_len;
  a.Hq = shape.q_heads;
  a.Hkv = shape.kv_heads;
  a.D = shape.head_dim;
  a.scale = shape.scale;
  return a;
}

// Calls launch(args_with_batch_offset, lens, batch_count) per chunk of the batch.
template <bool kF32, typename Launch>
void ForEachBatchChunk(Args<kF32> a, const AttentionShape& shape, const int32_t* kv_lens,
                       Launch launch) {
  for (int64_t b0 = 0; b0 < shape.batch; b0 += kAttentionBatchPerLaunch) {
    const int64_t count = std::min<int64_t>(kAttentionBatchPerLaunch, shape.batch - b0);
    KvLens lens{};
    for (int64_t i = 0; i < count; ++i) lens.len[i] = kv_lens[b0 + i];
    a.batch_offset = b0;
    launch(a, lens, static_cast<unsigned int>(count));
  }
}

}  // namespace

size_t AttentionForwardSharedBytes(int64_t D) {
  const int64_t P = D + 1;
  return sizeof(float) * static_cast<size_t>(kRowTile * P + kKeyTile * P + kKeyTile * D +
                                             kRowTile * D + kRowTile * kKeyTile + 3 * kRowTile);
}

size_t AttentionBackwardSharedBytes(int64_t D) {
  return std::max(DqSharedBytes(D), DkDvSharedBytes(D));
}

namespace {

template <bool kF32>
void AttentionForward(FloatIn q, FloatIn k, FloatIn v, FloatOut out, float* lse,
                      const AttentionShape& shape, const int32_t* kv_lens, cudaStream_t stream) {
  const int64_t rows = shape.q_len * (shape.q_heads / shape.kv_heads);
  if (shape.batch <= 0 || rows <= 0 || shape.head_dim <= 0) return;
  Args<kF32> a = MakeArgs<kF32>(shape);
  a.q = MakeReader<kF32>(q);
  a.k = MakeReader<kF32>(k);
  a.v = MakeReader<kF32>(v);
  a.out_w = MakeWriter<kF32>(out);
  a.lse_w = lse;
  const size_t shared = AttentionForwardSharedBytes(shape.head_dim);
  AllowSharedBytes(AttentionForwardKernel<kF32>, shared);
  const dim3 grid_xy(static_cast<unsigned int>((rows + kRowTile - 1) / kRowTile),
                     static_cast<unsigned int>(shape.kv_heads));
  ForEachBatchChunk(a, shape, kv_lens,
                    [&](const Args<kF32>& args, const KvLens& lens, unsigned int n) {
                      AttentionForwardKernel<kF32>
                          <<<dim3(grid_xy.x, grid_xy.y, n), kThreads, shared, stream>>>(args, lens);
                      SY_CUDA_CHECK_LAUNCH();
                    });
}

template <bool kF32>
void AttentionBackward(FloatIn q, FloatIn k, FloatIn v, FloatIn out, const float* lse, FloatIn dout,
                       FloatOut dq, FloatOut dk, FloatOut dv, const AttentionShape& shape,
                       const int32_t* kv_lens, float* workspace, cudaStream_t stream) {
  if (shape.batch <= 0 || shape.head_dim <= 0) return;
  Args<kF32> a = MakeArgs<kF32>(shape);
  a.q = MakeReader<kF32>(q);
  a.k = MakeReader<kF32>(k);
  a.v = MakeReader<kF32>(v);
  a.out = MakeReader<kF32>(out);
  a.lse = lse;
  a.dout = MakeReader<kF32>(dout);
  a.delta = workspace;
  a.delta_w = workspace;
  a.dq = MakeWriter<kF32>(dq);
  a.dk = MakeWriter<kF32>(dk);
  a.dv = MakeWriter<kF32>(dv);
  const int64_t rows = shape.q_len * (shape.q_heads / shape.kv_heads);
  if (rows > 0) {
    const int64_t total = shape.batch * shape.q_len * shape.q_heads;
    const int64_t blocks = std::min<int64_t>((total + 3) / 4, int64_t{1} << 20);
    AttentionDeltaKernel<kF32>
        <<<static_cast<unsigned int>(blocks), kThreads, 0, stream>>>(a, shape.batch);
    SY_CUDA_CHECK_LAUNCH();
    const size_t shared = DqSharedBytes(shape.head_dim);
    AllowSharedBytes(AttentionDqKernel<kF32>, shared);
    const unsigned int row_tiles = static_cast<unsigned int>((rows + kRowTile - 1) / kRowTile);
    ForEachBatchChunk(
        a, shape, kv_lens, [&](const Args<kF32>& args, const KvLens& lens, unsigned int n) {
          AttentionDqKernel<kF32><<<dim3(row_tiles, static_cast<unsigned int>(shape.kv_heads), n),
                                    kThreads, shared, stream>>>(args, lens);
          SY_CUDA_CHECK_LAUNCH();
        });
  }
  if (shape.kv_len > 0) {
    const size_t shared = DkDvSharedBytes(shape.head_dim);
    AllowSharedBytes(AttentionDkDvKernel<kF32>, shared);
    const unsigned int key_tiles =
        static_cast<unsigned int>((shape.kv_len + kKvTile - 1) / kKvTile);
    ForEachBatchChunk(
        a, shape, kv_lens, [&](const Args<kF32>& args, const KvLens& lens, unsigned int n) {
          AttentionDkDvKernel<kF32><<<dim3(key_tiles, static_cast<unsigned int>(shape.kv_heads), n),
                                      kThreads, shared, stream>>>(args, lens);
          SY_CUDA_CHECK_LAUNCH();
        });
  }
}

}  // namespace

// Both launchers dispatch on AllF32 of the tensor operands: the original f32 kernels, or the
// runtime-typed ones (each operand f32, bf16 or f16).

void LaunchAttention(FloatIn q, FloatIn k, FloatIn v, FloatOut out, float* lse,
                     const AttentionShape& shape, const int32_t* kv_lens, cudaStream_t stream) {
  DispatchAllF32(AllF32({q.type, k.type, v.type, out.type}), [&](auto tag) {
    constexpr bool f32 = decltype(tag)::value;
    AttentionForward<f32>(q, k, v, out, lse, shape, kv_lens, stream);
  });
}

int64_t AttentionBackwardWorkspaceFloats(const AttentionShape& shape) {
  return shape.batch * shape.q_heads * shape.q_len;
}

void LaunchAttentionBackward(FloatIn q, FloatIn k, FloatIn v, FloatIn out, const float* lse,
                             FloatIn dout, FloatOut dq, FloatOut dk, FloatOut dv,
                             const AttentionShape& shape, const int32_t* kv_lens, float* workspace,
                             cudaStream_t stream) {
  DispatchAllF32(AllF32({q.type, k.type, v.type, out.type, dout.type, dq.type, dk.type, dv.type}),
                 [&](auto tag) {
                   constexpr bool f32 = decltype(tag)::value;
                   AttentionBackward<f32>(q, k, v, out, lse, dout, dq, dk, dv, shape, kv_lens,
                                          workspace, stream);
                 });
}

}  // namespace sy::cuda
