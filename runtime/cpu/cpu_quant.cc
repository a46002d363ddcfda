#include "runtime/cpu/cpu_quant.h"

#include <algorithm>
#include <cstring>

#include "runtime/core/check.h"
#include "runtime/core/quant_blocks.h"
#include "runtime/cpu/cpu_vec.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace sy::cpu {
namespace {

inline float Finish(float acc, float alpha, float beta, const float* c) {
  return beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
}

// Any block type, any build: each block is dequantized into `block` floats on the stack, then
// multiplied with the vector helpers.
template <int MR>
void RowGeneric(DType dtype, const float* a, int64_t k, const uint8_t* w, float* sums) {
  const int64_t block = DTypeBlockSize(dtype);
  const auto bytes = static_cast<int64_t>(DTypeBlockBytes(dtype));
  alignas(64) float values[256];
  VecF acc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = VZero();
  float tail[MR] = {};
  for (int64_t b = 0; b < k / block; ++b) {
    DequantizeBlocks(dtype, w + b * bytes, values, block);
    int64_t i = 0;
    for (; i + kLanes <= block; i += kLanes) {
      const VecF wv = VLoad(values + i);
      for (int m = 0; m < MR; ++m) acc[m] = VFma(wv, VLoad(a + m * k + b * block + i), acc[m]);
    }
    for (; i < block; ++i) {
      for (int m = 0; m < MR; ++m) tail[m] += values[i] * a[m * k + b * block + i];
    }
  }
  for (int m = 0; m < MR; ++m) sums[m] = VReduceAdd(acc[m]) + tail[m];
}

// q8_0 or q4_0 against int8 activations, any build: each block's weights as int8 (value - 8
// for q4_0), the exact integer dot, then sum += d_w * d_a * dot.
template <int MR>
void RowInt8Generic(DType dtype, const Int8Activations& a, int64_t k, const uint8_t* w,
                    float* sums) {
  const auto bytes = static_cast<int64_t>(DTypeBlockBytes(dtype));
  const int64_t nb = k / 32;
  for (int m = 0; m < MR; ++m) sums[m] = 0.0f;
  int8_t x[32];
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = w + b * bytes;
    F16 h;
    std::memcpy(&h.bits, p, 2);
    const float dw = F16ToF32(h);
    if (dtype == DType::kQ8_0) {
      std::memcpy(x, p + 2, 32);
    } else {
      for (int i = 0; i < 16; ++i) {
        x[i] = static_cast<int8_t>((p[2 + i] & 0x0F) - 8);
        x[i + 16] = static_cast<int8_t>((p[2 + i] >> 4) - 8);
      }
    }
    for (int m = 0; m < MR; ++m) {
      const int8_t* y = a.q + m * k;
      int32_t dot = 0;
      for (int i = 0; i < 32; ++i) {
        dot += int32_t{x[i]} * int32_t{y[Int8ActivationIndex(nb, b, i)]};
      }
      sums[m] += dw * a.d[m * nb + b] * static_cast<float>(dot);
    }
  }
}

#if defined(__AVX2__) && defined(__FMA__)

inline float BlockScale(const uint8_t* block) {
  uint16_t bits;
  std::memcpy(&bits, block, 2);
#if defined(__F16C__)
  return _cvtsh_ss(bits);
#else
  return F16ToF32(F16{bits});
#endif
}

// Four accumulators per activation row, one per group of 8 values of a block, so the FMA chains
// are independent; the block's 32 weights are widened and scaled once for all MR rows.
template <int MR>
inline void AccumulateBlock(const float* a, int64_t k, int64_t offset, __m256 w0, __m256 w1,
                            __m256 w2, __m256 w3, __m256 (&acc)[MR][4]) {
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) {
    const float* x = a + m * k + offset;
    acc[m][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x), acc[m][0]);
    acc[m][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), acc[m][1]);
    acc[m][2] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x + 16), acc[m][2]);
    acc[m][3] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x + 24), acc[m][3]);
  }
}

// The sum of the 8 floats of a and b.
inline float HorizontalSum(__m128 a, __m128 b) {
  __m128 h = _mm_add_ps(a, b);
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

inline float HorizontalSum(__m256 s) {
  return HorizontalSum(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

// The sum of 4 int32.
inline int32_t SumI32(__m128i v) {
  v = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
  return _mm_cvtsi128_si32(_mm_add_epi32(v, _mm_shuffle_epi32(v, 1)));
}

template <int MR>
inline void Reduce(__m256 (&acc)[MR][4], float* sums) {
  for (int m = 0; m < MR; ++m) {
    sums[m] = HorizontalSum(
        _mm256_add_ps(_mm256_add_ps(acc[m][0], acc[m][1]), _mm256_add_ps(acc[m][2], acc[m][3])));
  }
}

// One q8_0 weight row { f16 d; i8 qs[32]; } against MR rows of int8 activations in their pair
// layout (Note [int8 activations]), two blocks per step, in 128-bit registers: each block's two
// 16-byte halves meet their activation halves as they are, and its integer dot (ggml's
// mul_sum_i8_pairs: |w| times y with w's sign, then the int16 pairs widened) is scaled by d_w *
// d_a, a scalar, into that block's own accumulator. The weights' absolute values and scales are
// taken once for all MR rows. On Zen 1, which splits each 256-bit op into two 128-bit halves,
// this does the same integer work as 256-bit registers without their lane inserts and per-lane
// f16 scales: one thread's GEMV ran 1.02-1.09x faster, and a 2-thread q8_0 decode step 1.06x
// (benchmarks/inference-results.md, session 17).
// How far ahead of its loads RowQ8_0 prefetches its weights, in bytes (about two rows of K = 1024).
// On this repository's Zen 1 test machine the hardware prefetcher alone left a one-thread GEMV
// streaming from DRAM ~15% slower per block than one whose weights sit in L2 (~4.0 against
// 3.45 ns); one prefetch per pair of blocks 2 KiB ahead brings it to ~3.9-4.0 -> 3.5-3.6 (CPU time,
// `runtime_ops_bench` BM_GemmBackend/q8_0/1/32768/1024 vs /256/1024, SY_NUM_THREADS=1; 1, 1.5,
// 2 and 3 KiB measured, 2-3 KiB best). RowQ4_0 prefetches as far: in its 128-bit form its DRAM rate
// was ~25% under its L2 rate without.
constexpr int64_t kQ8_0PrefetchBytes = 2048;

// ggml's mul_sum_i8_pairs before its conversion, on 16 values: the products x[i] * y[i] of two
// int8 vectors summed in groups of 4 into 4 int32, |x| given. vpmaddubsw multiplies unsigned by
// signed bytes, so x's sign moves onto y (|x| * sign(x) y); |-128| reads as 128 unsigned, and a
// pair sums to at most 2 * 128 * 127, inside int16 (so two such results cannot be added in int16).
inline __m128i DotI8x16(__m128i abs_x, __m128i x, const int8_t* y) {
  const __m128i pairs = _mm_maddubs_epi16(
      abs_x, _mm_sign_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y)), x));
  return _mm_madd_epi16(pairs, _mm_set1_epi16(1));
}

// For a q8_0 row of an odd number nb of blocks: adds its last block (whose activations are in
// order) to sums[0..MR).
template <int MR>
void AddLastQ8_0Block(const Int8Activations& a, int64_t k, const uint8_t* w, float* sums) {
  const int64_t nb = k / 32, b = nb - 1;
  const uint8_t* p = w + b * 34;
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 18));
  const __m128i abs_lo = _mm_sign_epi8(lo, lo), abs_hi = _mm_sign_epi8(hi, hi);
  const float dw = BlockScale(p);
  for (int m = 0; m < MR; ++m) {
    const int8_t* y = a.q + m * k + b * 32;
    const __m128i dot = _mm_add_epi32(DotI8x16(abs_lo, lo, y), DotI8x16(abs_hi, hi, y + 16));
    sums[m] += dw * a.d[m * nb + b] * static_cast<float>(SumI32(dot));
  }
}

template <int MR>
void RowQ8_0(const Int8Activations& a, int64_t k, const uint8_t* w, float* sums) {
  const int64_t nb = k / 32;
  __m128 acc[MR][2];
  for (int m = 0; m < MR; ++m) acc[m][0] = acc[m][1] = _mm_setzero_ps();
  for (int64_t b = 0; b + 2 <= nb; b += 2) {
    const uint8_t* p = w + b * 34;
    // Past the row's end this reads ahead into the next rows, as the caller's range runs. Past
    // the weight's end it may pull in a few unrelated lines, harmlessly (a prefetch never faults);
    // the address is formed as an integer, so no pointer leaves its array.
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + kQ8_0PrefetchBytes),
                 _MM_HINT_T0);
    // Values 0..15 and 16..31 of block b, then of block b + 1.
    const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 18));
    const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 36));
    const __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 52));
    const __m128i abs0 = _mm_sign_epi8(x0, x0), abs1 = _mm_sign_epi8(x1, x1);
    const __m128i abs2 = _mm_sign_epi8(x2, x2), abs3 = _mm_sign_epi8(x3, x3);
    const float dw0 = BlockScale(p), dw1 = BlockScale(p + 34);
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      // The pair layout: [b 0..15 | b+1 0..15 | b 16..31 | b+1 16..31].
      const int8_t* y = a.q + m * k + b * 32;
      const __m128i dot0 = _mm_add_epi32(DotI8x16(abs0, x0, y), DotI8x16(abs1, x1, y + 32));
      const __m128i dot1 = _mm_add_epi32(DotI8x16(abs2, x2, y + 16), DotI8x16(abs3, x3, y + 48));
      const float* da = a.d + m * nb + b;
      acc[m][0] = _mm_fmadd_ps(_mm_set1_ps(dw0 * da[0]), _mm_cvtepi32_ps(dot0), acc[m][0]);
      acc[m][1] = _mm_fmadd_ps(_mm_set1_ps(dw1 * da[1]), _mm_cvtepi32_ps(dot1), acc[m][1]);
    }
  }
  for (int m = 0; m < MR; ++m) sums[m] = HorizontalSum(acc[m][0], acc[m][1]);
  if (nb % 2 == 1) AddLastQ8_0Block<MR>(a, k, w, sums);
}

// A q4_0 block's 16 bytes of nibbles as its values 0..15 (low nibbles) and 16..31 (high ones),
// each still + 8.
inline void SplitNibbles(__m128i q, __m128i* lo, __m128i* hi) {
  const __m128i low4 = _mm_set1_epi8(0x0F);
  *lo = _mm_and_si128(q, low4);
  *hi = _mm_and_si128(_mm_srli_epi16(q, 4), low4);
}

// The 4 int32 sums of (n - 8) y of one q4_0 block whose nibbles are lo and hi (SplitNibbles),
// against its activation halves at y_lo (values 0..15) and y_hi (16..31) and its offsets (Note
// [int8 activations]). vpmaddubsw takes the unsigned nibbles n (pairs sum to at most 2 * 15 *
// 127); the two products add to 8 int16 of 4 values each, from which the precomputed 8 * (sum of
// those 4 activations) leaves sum((n - 8) y) exactly (|.| <= 4 * 8 * 127).
inline __m128i DotQ4_0(__m128i lo, __m128i hi, const int8_t* y_lo, const int8_t* y_hi,
                       const int16_t* offsets) {
  const __m128i products =
      _mm_add_epi16(_mm_maddubs_epi16(lo, _mm_loadu_si128(reinterpret_cast<const __m128i*>(y_lo))),
                    _mm_maddubs_epi16(hi, _mm_loadu_si128(reinterpret_cast<const __m128i*>(y_hi))));
  const __m128i offset = _mm_loadu_si128(reinterpret_cast<const __m128i*>(offsets));
  return _mm_madd_epi16(_mm_sub_epi16(products, offset), _mm_set1_epi16(1));
}

// For a q4_0 row of an odd number nb of blocks: adds its last block (whose activations are in
// order: its low nibbles meet values 0..15, the high ones 16..31) to sums[0..MR), as RowQ4_0.
template <int MR>
void AddLastQ4_0Block(const Int8Activations& a, int64_t k, const uint8_t* w, float* sums) {
  const int64_t nb = k / 32, b = nb - 1;
  const uint8_t* p = w + b * 18;
  __m128i lo, hi;
  SplitNibbles(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2)), &lo, &hi);
  const float dw = BlockScale(p);
  for (int m = 0; m < MR; ++m) {
    const int8_t* y = a.q + m * k + b * 32;
    const __m128i dot = DotQ4_0(lo, hi, y, y + 16, a.offsets + (m * nb + b) * 8);
    sums[m] += dw * a.d[m * nb + b] * static_cast<float>(SumI32(dot));
  }
}

// One q4_0 weight row { f16 d; u8 qs[16]; } (low nibbles values 0..15, high ones 16..31, each
// minus 8) against MR rows of int8 activations in their pair layout (Note [int8 activations]), two
// blocks per step, in 128-bit registers as RowQ8_0: each block's nibbles meet their activation
// halves as they are (DotQ4_0), and one convert and FMA per block scale by d_w * d_a. The weights
// are prefetched as RowQ8_0's: one thread streaming from DRAM went from 2.9-3.1 to 2.6 ns a block
// with the 128-bit form and the prefetch (benchmarks/inference-results.md, session 17).
template <int MR>
void RowQ4_0(const Int8Activations& a, int64_t k, const uint8_t* w, float* sums) {
  const int64_t nb = k / 32;
  __m128 acc[MR][2];
  for (int m = 0; m < MR; ++m) acc[m][0] = acc[m][1] = _mm_setzero_ps();
  for (int64_t b = 0; b + 2 <= nb; b += 2) {
    const uint8_t* p = w + b * 18;
    // As in RowQ8_0: a prefetch past the weight's end is harmless and forms no pointer.
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + kQ8_0PrefetchBytes),
                 _MM_HINT_T0);
    __m128i lo0, hi0, lo1, hi1;
    SplitNibbles(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2)), &lo0, &hi0);
    SplitNibbles(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 20)), &lo1, &hi1);
    const float dw0 = BlockScale(p), dw1 = BlockScale(p + 18);
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      // The pair layout: [b 0..15 | b+1 0..15 | b 16..31 | b+1 16..31].
      const int8_t* y = a.q + m * k + b * 32;
      const int16_t* offsets = a.offsets + (m * nb + b) * 8;
      const float* da = a.d + m * nb + b;
      acc[m][0] = _mm_fmadd_ps(_mm_set1_ps(dw0 * da[0]),
                               _mm_cvtepi32_ps(DotQ4_0(lo0, hi0, y, y + 32, offsets)), acc[m][0]);
      acc[m][1] =
          _mm_fmadd_ps(_mm_set1_ps(dw1 * da[1]),
                       _mm_cvtepi32_ps(DotQ4_0(lo1, hi1, y + 16, y + 48, offsets + 8)), acc[m][1]);
    }
  }
  for (int m = 0; m < MR; ++m) sums[m] = HorizontalSum(acc[m][0], acc[m][1]);
  if (nb % 2 == 1) AddLastQ4_0Block<MR>(a, k, w, sums);
}

// q4_k { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; }: 32 bytes of qs hold sub-block 2j in their
// low nibbles and 2j + 1 in their high ones; x = d * sc * q - dmin * m per sub-block.
template <int MR>
void RowQ4_K(const float* a, int64_t k, const uint8_t* w, float* sums) {
  __m256 acc[MR][4];
  for (int m = 0; m < MR; ++m) {
    for (int j = 0; j < 4; ++j) acc[m][j] = _mm256_setzero_ps();
  }
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  // The four groups of 8 values in 32 bytes of nibbles, widened to f32 and scaled.
  auto widen = [](__m256i q, __m256 scale, __m256 offset, __m256(&out)[4]) {
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m128i parts[4] = {lo, _mm_unpackhi_epi64(lo, lo), hi, _mm_unpackhi_epi64(hi, hi)};
    for (int g = 0; g < 4; ++g) {
      out[g] = _mm256_fmsub_ps(scale, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[g])), offset);
    }
  };
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* block = w + b * 144;
    const float d = BlockScale(block), dmin = BlockScale(block + 2);
    const uint8_t* scales = block + 4;
    for (int j = 0; j < 4; ++j) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 16 + 32 * j));
      for (int half = 0; half < 2; ++half) {
        uint8_t sc = 0, mn = 0;
        Q4KScaleMin(2 * j + half, scales, &sc, &mn);
        const __m256i nibbles =
            half == 0 ? _mm256_and_si256(q, low4) : _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        __m256 wv[4];
        widen(nibbles, _mm256_set1_ps(d * sc), _mm256_set1_ps(dmin * mn), wv);
        AccumulateBlock<MR>(a, k, b * 256 + 64 * j + 32 * half, wv[0], wv[1], wv[2], wv[3], acc);
      }
    }
  }
  Reduce<MR>(acc, sums);
}

// RoundActivationBlocks of one block of 32, vectorized as ggml's quantize_row_q8_0: the same
// f32 operations (max |x|, 127 / amax, x * id, round half to even), so the same values.
inline void QuantizeActivationBlock(const float* x, int8_t* q, float* d) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_ps(x + 8 * j);
  __m256 amax =
      _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                    _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float max = _mm_cvtss_f32(h);
  *d = max / 127.0f;
  const __m256 id = _mm256_set1_ps(max != 0.0f ? 127.0f / max : 0.0f);
  __m256i i[4];
  for (int j = 0; j < 4; ++j) i[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], id));
  // packs works within 128-bit lanes; the permute puts the 32 values back in order.
  const __m256i packed =
      _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
  const __m256i ordered =
      _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), ordered);
}

#endif

template <int MR>
void Rows(DType dtype, const float* a, const Int8Activations& qa, int64_t k, const uint8_t* w,
          float* c, int64_t ldc, float alpha, float beta, int64_t row_begin, int64_t row_end) {
  const size_t row_bytes = DTypeBytes(dtype, k);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w + static_cast<size_t>(r) * row_bytes;
    float sums[MR];
#if defined(__AVX2__) && defined(__FMA__)
    if (dtype == DType::kQ8_0) {
      RowQ8_0<MR>(qa, k, row, sums);
    } else if (dtype == DType::kQ4_0) {
      RowQ4_0<MR>(qa, k, row, sums);
    } else if (dtype == DType::kQ4_K) {
      RowQ4_K<MR>(a, k, row, sums);
    } else {
      RowGeneric<MR>(dtype, a, k, row, sums);
    }
#else
    if (TakesInt8Activations(dtype)) {
      RowInt8Generic<MR>(dtype, qa, k, row, sums);
    } else {
      RowGeneric<MR>(dtype, a, k, row, sums);
    }
#endif
    for (int m = 0; m < MR; ++m) {
      float* dst = c + m * ldc + r;
      *dst = Finish(sums[m], alpha, beta, dst);
    }
  }
}

}  // namespace

bool TakesInt8Activations(DType dtype) { return dtype == DType::kQ8_0 || dtype == DType::kQ4_0; }

// Note [int8 activations]
// A q4_0 block stores values 0..15 in the low nibbles of its 16 bytes and 16..31 in the high
// ones; a q8_0 block's 32 bytes are values 0..15 then 16..31. The activations are stored per pair
// of blocks as [b 0..15 | b+1 0..15 | b 16..31 | b+1 16..31] (Int8ActivationIndex): two blocks
// side by side in 256-bit registers (masking the q4_0 bytes gives [values 0..15 of block b | of
// block b + 1], shifting [16..31 of b | of b + 1]) meet them with no lane crossing. The kernels
// now run in 128-bit registers (faster on Zen 1, RowQ8_0), where each 16-byte half meets its
// own activation half at a fixed offset just the same. q4_0's nibbles are unsigned (0..15) where
// its values are n - 8: offsets[8 b + j] = 8 * (q[2j] + q[2j+1] + q[16+2j] + q[17+2j]) of block b
// (in order), the amount the 16-bit lane j of vpmaddubsw(low) + vpmaddubsw(high) exceeds sum((n -
// 8) q) by.
void QuantizeActivations(const float* a, int64_t rows, int64_t k, int8_t* q, float* d,
                         int16_t* offsets) {
  SY_CHECK(k % 32 == 0) << "QuantizeActivations: rows of " << k << " values";
  const int64_t blocks = rows * k / 32;
#if defined(__AVX2__) && defined(__FMA__)
  for (int64_t b = 0; b < blocks; ++b) QuantizeActivationBlock(a + b * 32, q + b * 32, d + b);
#else
  RoundActivationBlocks(a, rows * k, q, d);
#endif
  for (int64_t b = 0; b < blocks; ++b) {
    const int8_t* x = q + b * 32;
    for (int j = 0; j < 8; ++j) {
      offsets[b * 8 + j] =
          static_cast<int16_t>(8 * (x[2 * j] + x[2 * j + 1] + x[16 + 2 * j] + x[17 + 2 * j]));
    }
  }
  const int64_t nb = k / 32;
  int8_t pair[64];
  for (int64_t r = 0; r < rows; ++r) {
    int8_t* row = q + r * k;
    for (int64_t b = 0; b + 1 < nb; b += 2) {
      std::memcpy(pair, row + b * 32, 64);
      for (int i = 0; i < 32; ++i) {
        row[Int8ActivationIndex(nb, b, i)] = pair[i];
        row[Int8ActivationIndex(nb, b + 1, i)] = pair[32 + i];
      }
    }
  }
}

void QuantGemvRows(DType dtype, const float* a, const Int8Activations& qa, int64_t rows, int64_t k,
                   const void* w, float* c, int64_t ldc, float alpha, float beta, int64_t row_begin,
                   int64_t row_end) {
  SY_CHECK(IsQuantized(dtype)) << "QuantGemvRows on " << DTypeName(dtype);
  SY_CHECK(k % DTypeBlockSize(dtype) == 0)
      << "QuantGemvRows: rows of " << k << " values are not whole " << DTypeName(dtype)
      << " blocks";
  SY_CHECK(rows >= 1) << "QuantGemvRows: " << rows << " activation rows";
  SY_CHECK(TakesInt8Activations(dtype) ? qa.q != nullptr && qa.d != nullptr &&
                                             (dtype != DType::kQ4_0 || qa.offsets != nullptr)
                                       : a != nullptr)
      << "QuantGemvRows: " << DTypeName(dtype) << " without its activations";
  const auto* wb = static_cast<const uint8_t*>(w);
  // Up to 4 activation rows per pass over the row range; the caller's range (about 64 KiB of
  // weights) is still in L2 for the next 4.
  for (int64_t m0 = 0; m0 < rows; m0 += 4) {
    const int64_t nb = k / 32;
    const float* am = a != nullptr ? a + m0 * k : nullptr;
    const Int8Activations qm{qa.q != nullptr ? qa.q + m0 * k : nullptr,
                             qa.d != nullptr ? qa.d + m0 * nb : nullptr,
                             qa.offsets != nullptr ? qa.offsets + m0 * nb * 8 : nullptr};
    float* cm = c + m0 * ldc;
    switch (std::min<int64_t>(4, rows - m0)) {
      case 1:
        Rows<1>(dtype, am, qm, k, wb, cm, ldc, alpha, beta, row_begin, row_end);
        break;
      case 2:
        Rows<2>(dtype, am, qm, k, wb, cm, ldc, alpha, beta, row_begin, row_end);
        break;
      case 3:
        Rows<3>(dtype, am, qm, k, wb, cm, ldc, alpha, beta, row_begin, row_end);
        break;
      default:
        Rows<4>(dtype, am, qm, k, wb, cm, ldc, alpha, beta, row_begin, row_end);
        break;
    }
  }
}

void DequantizeRows(DType dtype, const void* w, int64_t k, int64_t row_begin, int64_t row_end,
                    float* dst) {
  const size_t row_bytes = DTypeBytes(dtype, k);
  DequantizeBlocks(dtype,
                   static_cast<const uint8_t*>(w) + static_cast<size_t>(row_begin) * row_bytes, dst,
                   (row_end - row_begin) * k);
}

}  // namespace sy::cpu
