// Private to runtime/cpu: products of activations with quantized weight rows (q8_0, q4_0, q4_k;
// runtime/core/quant_blocks.h), the GEMM operators' kernels for a quantized b [N,K].
//
// q8_0 and q4_0 weights multiply activations rounded to 8 bits per block of 32
// (QuantizeActivations, once per operator and shared by every row and thread), in integers as
// ggml does: per block, the 32 int8 x int8 products are summed exactly (AVX2: vpmaddubsw with the
// sign trick, vpmaddwd; q4_0 multiplies its unsigned nibbles and subtracts 8 times the
// activations' block sum afterwards) and scaled by d_w * d_a into f32 accumulators. The result is
// the dequantize-then-f32 product of the weight with the rounded activations
// (RoundActivationBlocks), up to the order of the f32 sums: what the op-check harness holds them
// to. Rounding the activations halves the work per weight byte against widening every weight to
// f32, which at decode's batch sizes made the kernel compute-bound on a 2-core AVX2 machine.
//
// q4_k keeps f32 activations: each weight block is widened in registers (-> f32, times its
// scales), so the result is the dequantize-then-f32 product up to the order of the f32 sums.
//
// AVX2 kernels for all three (AVX-512 builds use them too); builds without AVX2 run portable
// scalar integer dots (q8_0, q4_0) or dequantize one block at a time (q4_k).
//
// Thread-safety: pure functions over caller-owned memory; callers split rows across threads.
#pragma once

#include <cstdint>

#include "runtime/core/dtype.h"

namespace sy::cpu {

// Whether `dtype`'s kernels take activations rounded to 8 bits (q8_0, q4_0) instead of f32.
bool TakesInt8Activations(DType dtype);

// Activations of `rows` rows of k values (k a multiple of 32) rounded by QuantizeActivations.
struct Int8Activations {
  const int8_t* q = nullptr;  // [rows, k]
  const float* d = nullptr;   // [rows, k / 32], one scale per block
  const float* ds = nullptr;  // [rows, k / 32], d times the sum of the block's q (q4_0's offset)
};

// RoundActivationBlocks (runtime/core/quant_blocks.h) of a [rows, k] row-major, vectorized; the
// values are identical to the scalar reference's. q holds rows * k values, d and ds rows * k / 32.
void QuantizeActivations(const float* a, int64_t rows, int64_t k, int8_t* q, float* d, float* ds);

// For rows r in [row_begin, row_end) of w (quantized `dtype`, [N, k] row-major, k a multiple of
// the block size) and m in [0, rows) (rows >= 1):
//   c[m * ldc + r] = alpha * dot(x[m], w[r]) + beta * c[m * ldc + r]
// (with beta == 0, c is not read), where x is `qa` (TakesInt8Activations(dtype)) or `a`, [rows,
// k] f32 row-major (otherwise); the other may be null.
void QuantGemvRows(DType dtype, const float* a, const Int8Activations& qa, int64_t rows, int64_t k,
                   const void* w, float* c, int64_t ldc, float alpha, float beta, int64_t row_begin,
                   int64_t row_end);

// Dequantizes rows [row_begin, row_end) of w ([N, k], quantized `dtype`) into dst, row-major f32.
void DequantizeRows(DType dtype, const void* w, int64_t k, int64_t row_begin, int64_t row_end,
                    float* dst);

}  // namespace sy::cpu
