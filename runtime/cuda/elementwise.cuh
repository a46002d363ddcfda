// Elementwise kernels of the CUDA backend: fill, dtype conversion, arithmetic, activations and
// their backwards. Launchers take raw device pointers (contiguous, n elements) and the stream they
// enqueue on; they never synchronize and allocate nothing. Output may alias an input of the same
// shape (each element is read before it is written, by the same thread).
//
// Thread-safety: launchers may be called from any thread; ordering is that of `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/cuda/kernel_types.h"

namespace sy::cuda {

// Sets n elements of `element_bytes` (1, 2, 4 or 8) bytes each to the low bytes of `bits`.
void LaunchFill(void* out, int element_bytes, uint64_t bits, int64_t n, cudaStream_t stream);

// out[i] = src[i] between floating-point types, round to nearest even. Same type: a copy.
void LaunchConvert(const void* src, FloatType src_type, void* out, FloatType out_type, int64_t n,
                   cudaStream_t stream);

// The arithmetic launchers below take each operand in its own dtype (FloatIn/FloatOut; Note
// [16-bit operands]): they compute in f32 and round each output once. In-place calls alias
// operands of one dtype.
enum class BinaryOp : uint8_t { kAdd, kMul };
void LaunchBinary(BinaryOp op, FloatIn a, FloatIn b, FloatOut out, int64_t n, cudaStream_t stream);

// out = alpha * x.
void LaunchScale(FloatIn x, float alpha, FloatOut out, int64_t n, cudaStream_t stream);
// c = beta * c with the BLAS convention that beta == 0 writes zeros (never reads c).
void LaunchBetaScale(FloatOut c, float beta, int64_t n, cudaStream_t stream);
// y += alpha * x.
void LaunchAxpy(float alpha, FloatIn x, FloatOut y, int64_t n, cudaStream_t stream);
// out[r, c] = x[r, c] + bias[c], x [rows, cols].
void LaunchAddBias(FloatIn x, FloatIn bias, FloatOut out, int64_t rows, int64_t cols,
                   cudaStream_t stream);

enum class Activation : uint8_t { kSilu, kGelu, kRelu };  // GELU is the exact (erf) form
void LaunchActivation(Activation act, FloatIn x, FloatOut out, int64_t n, cudaStream_t stream);
// dx = dout * act'(x).
void LaunchActivationBackward(Activation act, FloatIn x, FloatIn dout, FloatOut dx, int64_t n,
                              cudaStream_t stream);

// out = silu(gate) * up.
void LaunchSwiglu(FloatIn gate, FloatIn up, FloatOut out, int64_t n, cudaStream_t stream);
// dgate = dout * up * silu'(gate), dup = dout * silu(gate).
void LaunchSwigluBackward(FloatIn gate, FloatIn up, FloatIn dout, FloatOut dgate, FloatOut dup,
                          int64_t n, cudaStream_t stream);

// Splits each f32 of a [outer, inner] into three bf16 terms hi + mid + lo whose sum equals it to
// about 2^-24 relative (8 significant bits each; the two differences are exact in f32), written as
// pieces [outer][3][inner] (bf16). Non-finite inputs keep hi = the value and zero mid and lo.
// Used by the bf16-weight GEMM: see Note [mixed-precision GEMM] in cuda_gemm.cc.
void LaunchSplitBf16x3(const float* a, int64_t outer, int64_t inner, void* pieces,
                       cudaStream_t stream);

// The combine step of that GEMM: for each batch b, row i < m and column j < n,
//   c[b, i, j] = alpha * ((t(2) + t(1)) + t(0)) + beta * c[b, i, j]   (beta == 0: c not read)
// with t(p) = t[b * 3 * m * n + (i * row_stride + p * piece_stride) * n + j].
void LaunchCombineSplit(const float* t, int64_t batch, int64_t m, int64_t n, int64_t row_stride,
                        int64_t piece_stride, float alpha, float beta, float* c,
                        cudaStream_t stream);

}  // namespace sy::cuda
