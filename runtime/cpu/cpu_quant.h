// Private to runtime/cpu: products of activations with quantized weight rows (q8_0, q4_0 and the
// k-quants q2_k ... q6_k; runtime/core/quant_blocks.h), the GEMM operators' kernels for a
// quantized b [N,K].
//
// All of them multiply activations rounded to 8 bits per block of 32 (QuantizeActivations, once per
// operator and shared by every row and thread), in integers as ggml does: per block, the 32 int8
// x int8 (or 4-bit x int8) products are summed exactly (AVX2: vpmaddubsw, with the sign trick for
// q8_0; q8_0 takes vpdpbusd instead where the target has VNNI) and scaled by the block's scales
// into f32 accumulators. The result is the dequantize-then-f32 product of the weight with the
// rounded activations (RoundActivationBlocks), up to the order of the f32 sums: what the op-check
// harness holds them to. Rounding the activations halves the work per weight byte against widening
// every weight to f32, which at decode's batch sizes made the kernels compute-bound on a 2-core
// AVX2 machine (q4_k, widened to f32 until session 21, ran at half q4_0's speed per weight).
//
// The activations are stored for the kernels (Note [int8 activations] in cpu_quant.cc): each
// pair of blocks interleaved by halves, so that one 256-bit register meets values 0..15 of two
// weight blocks (q4_0's low nibbles, the first 16 bytes of q8_0's, the first 16 nibbles of two
// q4_k sub-blocks) and another values 16..31, with the scales repeated per lane, for q4_0 8 times
// the sums its nibbles' -8 offset takes away, and for q4_k each block's sum (its sub-blocks'
// minimums multiply it). The kernels then take two blocks per step with no shuffle across lanes
// and one convert and FMA per two blocks (on Zen 1, whose 256-bit ops are two 128-bit halves, the
// total of vector ops is what bounds them).
//
// The kernels prefetch their weights 2 KiB ahead of their loads (kQ8_0PrefetchBytes in
// cpu_quant.cc): each is nearly as slow as one core's DRAM stream, and the hardware prefetcher
// alone left their DRAM rates 15-25% under their L2 rates. The prefetch's hint is chosen for the
// CPU (cpu_vec.h PrefetchOnce, weight_prefetch.h): non-temporal on AMD, so the weights do not evict
// the rest of the step; the ordinary one elsewhere (on an Intel Xeon the non-temporal one halved
// it).
//
// q5_k runs q4_k's kernel with the fifth bit ORed in; the k-quants of 16-value sub-blocks (q6_k,
// q3_k, q2_k) take their scales in vpmaddwd, one register at a time, q6_k's and q3_k's offsets
// (32, 4) as a second vpmaddubsw and q2_k's minimums as a second sum (RowSixteens in
// cpu_quant.cc).
//
// AVX2 kernels for all of them (AVX-512 builds use them too); builds without AVX2 run portable
// scalar integer dots. With VNNI (AVX512-VNNI with VL, or AVX-VNNI) q8_0's dot is one vpdpbusd per
// 32 bytes for vpmaddubsw + vpmaddwd + vpaddd: on an Intel Xeon a 32-token q8_0 prefill ran
// 1.1-1.2x faster, decode alike (memory-bound; session 23). q4_0 and the k-quants keep the int16
// step, where their offsets and sub-block scales apply per int16 lane.
//
// Thread-safety: pure functions over caller-owned memory; callers split rows across threads.
#pragma once

#include <cstdint>

#include "runtime/core/dtype.h"

namespace sy::cpu {

// Activations of `rows` rows of k values (k a multiple of 32) rounded by QuantizeActivations,
// for every quantized dtype alike; nb = k / 32 blocks per row.
struct Int8Activations {
  const int8_t* q = nullptr;         // [rows, k], pairs of blocks interleaved (Int8ActivationIndex)
  const float* d = nullptr;          // [rows, nb], one scale per block
  const float* d4 = nullptr;         // [rows, nb, 4]: d[b] 4 times, one per lane
  const int16_t* offsets = nullptr;  // [rows, nb, 8]: q4_0's (Note [int8 activations])
  const float* sums = nullptr;       // [rows, nb]: d[b] * (sum of block b's q), q4_k/q5_k minimums
  // [rows, k / 16]: the sum of each 16 values of q (in order), for the 16-value sub-blocks of
  // q6_k, q3_k and q2_k (their offsets and minimums)
  const int16_t* sums16 = nullptr;
};

// RoundActivationBlocks (runtime/core/quant_blocks.h) of a [rows, k] row-major, vectorized, in
// the kernels' layout: the values are identical to the scalar reference's, reordered within each
// pair of blocks (Int8ActivationIndex). q holds rows * k values, d and sums rows * k / 32 each,
// d4 rows * k / 8, offsets rows * k / 4 and sums16 rows * k / 16.
void QuantizeActivations(const float* a, int64_t rows, int64_t k, int8_t* q, float* d, float* d4,
                         int16_t* offsets, float* sums, int16_t* sums16);

// Where value i (0..31) of block b of a row of nb blocks sits in Int8Activations::q: within a
// pair of blocks (2j, 2j + 1) the 64 bytes hold [b 2j values 0..15, b 2j+1 values 0..15, b 2j
// values 16..31, b 2j+1 values 16..31]; an odd last block stays in order.
inline int64_t Int8ActivationIndex(int64_t nb, int64_t b, int64_t i) {
  if (b == nb - 1 && nb % 2 == 1) return b * 32 + i;
  return (b / 2) * 64 + (i / 16) * 32 + (b % 2) * 16 + i % 16;
}

// For rows r in [row_begin, row_end) of w (quantized `dtype`, [N, k] row-major, k a multiple of
// the block size) and m in [0, rows) (rows >= 1):
//   c[m * ldc + r] = alpha * dot(x[m], w[r]) + beta * c[m * ldc + r]
// (with beta == 0, c is not read), where x is `qa`, the rounded activations.
void QuantGemvRows(DType dtype, const Int8Activations& qa, int64_t rows, int64_t k, const void* w,
                   float* c, int64_t ldc, float alpha, float beta, int64_t row_begin,
                   int64_t row_end);

// Dequantizes rows [row_begin, row_end) of w ([N, k], quantized `dtype`) into dst, row-major f32.
void DequantizeRows(DType dtype, const void* w, int64_t k, int64_t row_begin, int64_t row_end,
                    float* dst);

}  // namespace sy::cpu
