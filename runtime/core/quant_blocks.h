// ggml's quantized block layouts (the DTypes q8_0, q4_0 and the k-quants), byte for byte as ggml
// and GGUF store them (ggml/src/ggml-common.h). A block covers DTypeBlockSize consecutive values of
// a row:
//   q8_0  { f16 d; i8 qs[32]; }                       x[i] = d * qs[i]
//   q4_0  { f16 d; u8 qs[16]; }                       x[i] = d * ((qs[i] & 15) - 8),
//                                                     x[i + 16] = d * ((qs[i] >> 4) - 8)
//   q4_k  { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; }  256 values in 8 sub-blocks of 32 with
//         6-bit scales and mins packed in `scales` (get_scale_min_k4); sub-block pair j uses
//         qs[32 j / 2 ..] low nibbles then high nibbles: x = d * sc * q - dmin * m
//   q5_k  { f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }  q4_k's layout with a fifth
//         bit per value: sub-block 2j takes bit 2j of qh[l], 2j + 1 bit 2j + 1 (q in 0..31)
//   q6_k  { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; }  256 values in 16 sub-blocks of 16 with
//         signed 8-bit scales; in each half of 128, value l + 32 j (j = 0..3) takes 4 low bits
//         from ql (byte l or l + 32, low or high nibble) and 2 high bits from qh[l] (bits 2j,
//         2j + 1): x = d * scales[l / 16 + 2 j] * (q - 32)
//   q2_k  { u8 scales[16]; u8 qs[64]; f16 d; f16 dmin; }  16 sub-blocks of 16, each with a 4-bit
//         scale and minimum; in each half of 128, value l + 32 j takes bits 2j, 2j + 1 of qs[l]:
//         x = d * sc * q - dmin * m
//   q3_k  { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; }  q2_k's 2-bit values with a third
//         bit in hmask (bit 4h + j of hmask[l] in half h; clear subtracts 4) and 6-bit scales:
//         x = d * (sc - 32) * (q - 4 clear)
//
// These are the plain scalar versions: the oracle of the CPU kernels (runtime/cpu/cpu_quant.h)
// and the converters of the formats layer (storage/formats/ggml_quants.h).
//
// The quantizers reproduce ggml's reference quantize_row_q8_0_ref / quantize_row_q4_0_ref (and
// gguf-py's gguf.quants, which matches them bit for bit): q8_0 takes d = amax / 127 and rounds
// x / d half away from zero; q4_0 takes d = (the value of largest magnitude) / -8 and
// q = min(15, trunc(x / d + 8.5)). There is no k-quant quantizer (ggml's search scales; a k-quant
// tensor comes from a GGUF file).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/core/dtype.h"

namespace sy {

// ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j (0..7) of a q4_k block, from
// its 12 packed `scales` bytes.
inline void Q4KScaleMin(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// ggml's q3_k scale of sub-block j (0..15), minus 32, from its 12 packed `scales` bytes: the low
// 4 bits are the low (j < 8) or high nibble of byte j % 8, the high 2 bits bits 2 (j / 4) of byte
// 8 + j % 4.
inline int Q3KScale(int j, const uint8_t* scales) {
  const int low = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
  const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | high << 4) - 32;
}

// Where a k-quant block keeps its f16 super-block scales: d and dmin at bytes 0 and 2 (q4_k, q5_k),
// 80 and 82 (q2_k); d alone at 108 (q3_k), 208 (q6_k). Empty for other dtypes. (For tests and
// benchmarks that make random blocks.)
inline std::vector<size_t> KQuantScaleOffsets(DType dtype) {
  switch (dtype) {
    case DType::kQ4_K:
    case DType::kQ5_K:
      return {0, 2};
    case DType::kQ2_K:
      return {80, 82};
    case DType::kQ3_K:
      return {108};
    case DType::kQ6_K:
      return {208};
    default:
      return {};
  }
}

// Dequantizes n values (a whole number of blocks) of quantized `dtype` at `src` into dst.
// Aborts for a plain dtype or a partial block (callers validate sizes first).
void DequantizeBlocks(DType dtype, const void* src, float* dst, int64_t n);

// Quantizes n values (a multiple of 32) into q8_0 or q4_0 blocks at dst (n / 32 blocks).
// Aborts for any other dtype or a partial block.
void QuantizeBlocks(DType dtype, const float* src, void* dst, int64_t n);

// Rounds n activations (a multiple of 32) to 8 bits, as the integer kernels of quantized
// weights take them (runtime/cpu/cpu_quant.h): per block b of 32 values, amax = max |x|,
// d[b] = amax / 127 and q[i] = round-half-even(x[i] * (127 / amax)) (all 0 when amax == 0), so
// x[i] ~ d[b] * q[i] with an error of at most d[b] / 2 (plus f32 rounding). This is ggml's
// quantize_row_q8_0 (AVX2 path) except that d stays f32 instead of being rounded to f16.
void RoundActivationBlocks(const float* x, int64_t n, int8_t* q, float* d);

// The GEMM operators round the activations of quantized weights (every quantized dtype) this way
// for a group of at most this many rows of a (a decode step, or a prefill's tokens of one expert);
// larger groups multiply f32 activations with the dequantized weights (runtime/backend/backend.h,
// Gemm).
inline constexpr int64_t kInt8ActivationMaxRows = 64;

}  // namespace sy
