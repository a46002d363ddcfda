// Private to runtime/cpu: products of f32 activations with quantized weight rows (q8_0, q4_0,
// q4_k; runtime/core/quant_blocks.h), the GEMM operators' kernels for a quantized b [N,K].
//
// The activations stay f32 and each weight block is widened in registers (int8 -> f32, times its
// scale), so the result is the dequantize-then-f32 product up to the order of the f32 sums: the
// same contract as the bf16/f16 kernels, and what the op-check harness holds them to. (ggml
// instead rounds the activations to 8 bits and multiplies integers; at decode's batch sizes the
// kernel is bound by the weight stream, which both read once.) AVX2 kernels for q8_0, q4_0 and
// q4_k (AVX-512 builds use them too); builds without AVX2 dequantize one block at a time into a
// stack buffer and use the portable vector helpers.
//
// Thread-safety: pure functions over caller-owned memory; callers split rows across threads.
#pragma once

#include <cstdint>

#include "runtime/core/dtype.h"

namespace sy::cpu {

// For rows r in [row_begin, row_end) of w (quantized `dtype`, [N, k] row-major, k a multiple of
// the block size) and m in [0, rows) (rows in [1, 4]):
//   c[m * ldc + r] = alpha * dot(a[m * k ...], w[r]) + beta * c[m * ldc + r]
// (with beta == 0, c is not read).
void QuantGemvRows(DType dtype, const float* a, int64_t rows, int64_t k, const void* w, float* c,
                   int64_t ldc, float alpha, float beta, int64_t row_begin, int64_t row_end);

// Dequantizes rows [row_begin, row_end) of w ([N, k], quantized `dtype`) into dst, row-major f32.
void DequantizeRows(DType dtype, const void* w, int64_t k, int64_t row_begin, int64_t row_end,
                    float* dst);

}  // namespace sy::cpu
