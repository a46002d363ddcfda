// Private to runtime/cpu: a GEMM whose operands a and b are both bf16 and whose output c is f32,
// accumulated in f32, on the AVX512-BF16 dot product (vdpbf16ps: 16 lanes, each the sum of two
// bf16 products, so one instruction makes 32 products where an f32 FMA makes 16). The operator for
// mixed-precision training's matrices of activations and weights.
//
// The kernels are compiled for AVX512-BF16 with function attributes whatever the build targets
// (so the file builds with -march=x86-64-v3 or no -march at all), and run only where the CPU has
// the instructions: callers ask Bf16DotProducts() first and take another path when it is false.
//
// Numerics: the products of two bf16 values are exact in f32, so the only rounding is the f32
// summation (about k * 2^-24 of sum |a||b|), then alpha and beta. As the instruction does, bf16
// subnormal inputs count as zero and sums below the f32 normal range flush to zero (DAZ and FTZ,
// whatever MXCSR says).
//
// Memory: a call packs op(a) and op(b) into two scratch buffers of the calling thread (64-byte
// aligned, grow-only, kept until the thread exits), each at most 8 MiB (chunks of rows of a and
// columns of b beyond that; more only for K past about 130 000), so after the first call of a
// shape the steady state allocates nothing. No alignment is asked of a, b, c or their strides;
// the regions of c outside [m, n] (the rest of each ldc row) are not touched.
//
// Thread-safety: a call runs on the given pool from its caller's thread and returns when done.
// Calls from different threads may run at once (each packs into its own thread's scratch), on
// one pool or several, and a call from inside a pool task runs inline (ThreadPool::ParallelFor).
// Bf16DotProducts is safe from any thread; SetBf16DotProductsForTesting is for tests, between
// calls.
#pragma once

#include <cstdint>

#include "runtime/core/dtype.h"
#include "runtime/core/thread_pool.h"

namespace sy::cpu {

// Whether Bf16Gemm runs on this CPU's bf16 dot-product instructions (AVX512-BF16 vdpbf16ps):
// the CPU has them (checked at run time with cpuid, __builtin_cpu_supports) and they are not turned
// off by SY_CPU_BF16_DOT=0 or SetBf16DotProductsForTesting(false).
bool Bf16DotProducts();
// Tests: force the dot-product path off (false) or back to the CPU's default (true).
void SetBf16DotProductsForTesting(bool enabled);

struct Bf16GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  const BF16* a = nullptr;  // op(a) is [m, k]; a is [m, k] row-major, or [k, m] when trans_a
  int64_t lda = 0;          // row stride of a as stored
  bool trans_a = false;
  const BF16* b = nullptr;  // op(b) is [k, n]; b is [k, n], or [n, k] when trans_b
  int64_t ldb = 0;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;   // beta == 0: c is not read (may hold NaN), BLAS rule
  float* c = nullptr;  // [m, n] f32
  int64_t ldc = 0;
};

// c = alpha * op(a) op(b) + beta * c with f32 accumulation, on `pool` (call it from one thread; it
// runs ParallelFor regions itself). Requires Bf16DotProducts() (SY_CHECK).
void Bf16Gemm(ThreadPool& pool, const Bf16GemmArgs& args);

}  // namespace sy::cpu
