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

#if !defined(__AVX2__) || !defined(__FMA__)

// Block b (32 values) of a quantized row as the integer kernels take it: the 32 values as integers
// x, a scale for values 0..15 and one for 16..31 (equal but for q6_k, q3_k and q2_k, whose
// sub-blocks are 16 long), and the minimums the q4_k, q5_k and q2_k sub-blocks subtract, so that
// value i is scale[i / 16] * x[i] - min[i / 16].
struct IntBlock {
  int8_t x[32];
  float scale[2];
  float min[2] = {0.0f, 0.0f};
};

float HalfScale(const uint8_t* p) {
  F16 h;
  std::memcpy(&h.bits, p, 2);
  return F16ToF32(h);
}

IntBlock UnpackBlock(DType dtype, const uint8_t* row, int64_t b) {
  IntBlock out;
  if (dtype == DType::kQ8_0 || dtype == DType::kQ4_0) {
    const uint8_t* p = row + b * static_cast<int64_t>(DTypeBlockBytes(dtype));
    out.scale[0] = out.scale[1] = HalfScale(p);
    for (int i = 0; i < 16; ++i) {
      if (dtype == DType::kQ8_0) {
        out.x[i] = static_cast<int8_t>(p[2 + i]);
        out.x[i + 16] = static_cast<int8_t>(p[18 + i]);
      } else {
        out.x[i] = static_cast<int8_t>((p[2 + i] & 0x0F) - 8);
        out.x[i + 16] = static_cast<int8_t>((p[2 + i] >> 4) - 8);
      }
    }
    return out;
  }
  const uint8_t* block = row + (b / 8) * static_cast<int64_t>(DTypeBlockBytes(dtype));
  const int j = static_cast<int>(b % 8);  // the 32-value sub-block within the super-block
  if (dtype == DType::kQ2_K || dtype == DType::kQ3_K) {
    // Half j / 4 of 128 values; 32-value group g = j % 4 takes bits 2g, 2g + 1 of qs[l] and the
    // scales of 16-value sub-blocks 2g, 2g + 1 of the half. q2_k: 4-bit scale and minimum per
    // sub-block; q3_k: bit 4 (j / 4) + g of hmask[l] clear subtracts 4, 6-bit scales minus 32.
    const int g = j % 4, half = j / 4;
    const bool q2 = dtype == DType::kQ2_K;
    const uint8_t* qs = block + (q2 ? 16 : 32) + 32 * half;
    for (int l = 0; l < 32; ++l) {
      int q = (qs[l] >> (2 * g)) & 3;
      if (!q2 && ((block[l] >> (4 * half + g)) & 1) == 0) q -= 4;
      out.x[l] = static_cast<int8_t>(q);
    }
    for (int r = 0; r < 2; ++r) {
      const int sub = 8 * half + 2 * g + r;
      if (q2) {
        out.scale[r] = HalfScale(block + 80) * static_cast<float>(block[sub] & 0x0F);
        out.min[r] = HalfScale(block + 82) * static_cast<float>(block[sub] >> 4);
      } else {
        out.scale[r] = HalfScale(block + 108) * static_cast<float>(Q3KScale(sub, block + 96));
      }
    }
    return out;
  }
  if (dtype == DType::kQ6_K) {
    // Half j / 4 of 128 values; within it, 32-value group g = j % 4 takes ql[l + 32 (g % 2)]'s
    // low (g < 2) or high nibble and bits 2g, 2g + 1 of qh[l], and scales 2g (l < 16), 2g + 1.
    const uint8_t* ql = block + 64 * (j / 4);
    const uint8_t* qh = block + 128 + 32 * (j / 4);
    const auto* sc = reinterpret_cast<const int8_t*>(block + 192 + 8 * (j / 4));
    const int g = j % 4;
    const float d = HalfScale(block + 208);
    for (int l = 0; l < 32; ++l) {
      const uint8_t byte = ql[l + 32 * (g % 2)];
      const int low = g < 2 ? byte & 0x0F : byte >> 4;
      out.x[l] = static_cast<int8_t>((low | (((qh[l] >> (2 * g)) & 3) << 4)) - 32);
    }
    out.scale[0] = d * sc[2 * g];
    out.scale[1] = d * sc[2 * g + 1];
    return out;
  }
  // q4_k and q5_k: sub-block j takes the low (even j) or high nibbles of qs[32 (j / 2) ..], and
  // for q5_k bit j of qh[l] as its fifth bit.
  const bool five = dtype == DType::kQ5_K;
  const uint8_t* qs = block + (five ? 48 : 16) + 32 * (j / 2);
  uint8_t sc = 0, m = 0;
  Q4KScaleMin(j, block + 4, &sc, &m);
  out.scale[0] = out.scale[1] = HalfScale(block) * sc;
  out.min[0] = out.min[1] = HalfScale(block + 2) * m;
  for (int l = 0; l < 32; ++l) {
    int q = j % 2 == 0 ? qs[l] & 0x0F : qs[l] >> 4;
    if (five) q |= ((block[16 + l] >> j) & 1) << 4;
    out.x[l] = static_cast<int8_t>(q);
  }
  return out;
}

// Any quantized dtype against int8 activations, any build: per block of 32 weights (UnpackBlock)
// the exact integer dots and activation sums of each half of 16, then
// sum += d_a * (scale_0 * dot_0 + scale_1 * dot_1 - min_0 * sum_0(y) - min_1 * sum_1(y)).
template <int MR>
void RowInt8Generic(DType dtype, const Int8Activations& a, int64_t k, const uint8_t* w,
                    float* sums) {
  const int64_t nb = k / 32;
  for (int m = 0; m < MR; ++m) sums[m] = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const IntBlock block = UnpackBlock(dtype, w, b);
    for (int m = 0; m < MR; ++m) {
      const int8_t* y = a.q + m * k;
      int32_t dot[2] = {0, 0}, sum[2] = {0, 0};
      for (int i = 0; i < 32; ++i) {
        const int32_t yi = y[Int8ActivationIndex(nb, b, i)];
        dot[i / 16] += int32_t{block.x[i]} * yi;
        sum[i / 16] += yi;
      }
      float total = 0.0f;
      for (int h = 0; h < 2; ++h) {
        total +=
            block.scale[h] * static_cast<float>(dot[h]) - block.min[h] * static_cast<float>(sum[h]);
      }
      sums[m] += a.d[m * nb + b] * total;
    }
  }
}

#endif

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

// body(b, slot) for b in [0, blocks): even blocks on accumulator slot 0, odd ones on slot 1. The
// bodies are lambdas marked SY_KERNEL_INLINE: GCC does not inline a large one by itself, and its
// accumulators would then live in memory.
#define SY_KERNEL_INLINE __attribute__((always_inline))
template <typename Body>
SY_KERNEL_INLINE inline void ForBlockPairs(int64_t blocks, const Body& body) {
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    body(b, 0);
    body(b + 1, 1);
  }
  if (b < blocks) body(b, 0);
}

inline float HorizontalSum(__m256 s) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// The f16 scales at p0 and p1, each in one 128-bit lane: [f32(p0) x 4 | f32(p1) x 4].
inline __m256 TwoBlockScales(const uint8_t* p0, const uint8_t* p1) {
#if defined(__F16C__)
  uint16_t lo, hi;
  std::memcpy(&lo, p0, 2);
  std::memcpy(&hi, p1, 2);
  const __m128i both = _mm_cvtsi32_si128(static_cast<int>(lo | static_cast<uint32_t>(hi) << 16));
  return _mm256_cvtph_ps(
      _mm_shuffle_epi8(both, _mm_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3)));
#else
  return _mm256_set_m128(_mm_set1_ps(BlockScale(p1)), _mm_set1_ps(BlockScale(p0)));
#endif
}

// acc plus ggml's mul_sum_i8_pairs_float before its conversion: the 32 products x[i] * y[i] of two
// int8 vectors, summed in groups of 4 into 8 int32. The byte multiplies take unsigned by signed
// bytes, so x's sign moves onto y (|x| * sign(x) y); |-128| reads as 128 unsigned. With VNNI
// (AVX512-VNNI on 256-bit registers, or AVX-VNNI) one vpdpbusd multiplies and adds all four into
// acc. Without it vpmaddubsw sums pairs in int16 (at most 2 * 128 * 127, inside int16, so two such
// results cannot be added in int16) and vpmaddwd the pairs of pairs; both give the exact sums.
inline __m256i AddDotI8(__m256i acc, __m256i abs_x, __m256i x, __m256i y) {
  const __m256i signed_y = _mm256_sign_epi8(y, x);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, abs_x, signed_y);
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(acc, abs_x, signed_y);
#else
  const __m256i pairs = _mm256_maddubs_epi16(abs_x, signed_y);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
#endif
}

// One q8_0 weight row { f16 d; i8 qs[32]; } against MR rows of int8 activations in their pair
// layout (Note [int8 activations]), two blocks per step: one register holds values 0..15 of both
// blocks, another 16..31, each meeting the activations' 32-byte half as it is; the two integer
// dots add in int32, and one convert and FMA scale 4 lanes by each block's d_w * d_a. The
// weights' absolute values and scales are taken once for all MR rows; pairs alternate between
// two accumulators so the FMA chains overlap.
// How far ahead of its loads RowQ8_0 prefetches its weights, in bytes (about two rows of K = 1024).
// On this repository's Zen 1 test machine the hardware prefetcher alone left a one-thread GEMV
// streaming from DRAM ~15% slower per block than one whose weights sit in L2 (~4.0 against
// 3.45 ns); one prefetch per pair of blocks 2 KiB ahead brings it to ~3.9-4.0 -> 3.5-3.6 (CPU time,
// `runtime_ops_bench` BM_GemmBackend/q8_0/1/32768/1024 vs /256/1024, SY_NUM_THREADS=1; 1, 1.5,
// 2 and 3 KiB measured, 2-3 KiB best). RowQ4_0 prefetches as far: a one-thread q4_0 GEMV from
// DRAM went from ~3.4 to ~2.75 ns a block with it (session 17; L2 rate unchanged, ~2.8). Both
// prefetch with the hint chosen for the CPU (PrefetchOnce): on the Zen 1 the non-temporal one, so
// that the weights do not evict the rest of the step from L2 and L3 (session 20: a q8_0 decode
// step's time outside its parallel regions went from 1.2 to 0.75-0.9 ms); on an Intel Xeon the
// ordinary one, which made a q8_0 decode step 2x faster than the non-temporal (session 23).
constexpr int64_t kQ8_0PrefetchBytes = 2048;

template <int MR>
void RowQ8_0(const Int8Activations& a, int64_t k, const uint8_t* w, float* sums) {
  const int64_t nb = k / 32;
  __m256 acc[MR][2];
  for (int m = 0; m < MR; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
  ForBlockPairs(nb / 2, [&](int64_t pair, int slot) SY_KERNEL_INLINE {
    const int64_t b = 2 * pair;
    const uint8_t* p = w + b * 34;
    // Past the row's end this reads ahead into the next rows, as the caller's range runs.
    PrefetchOnce(p, kQ8_0PrefetchBytes);
    const __m256i lo = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 36)),
                                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2)));
    const __m256i hi = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 52)),
                                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 18)));
    const __m256i abs_lo = _mm256_sign_epi8(lo, lo), abs_hi = _mm256_sign_epi8(hi, hi);
    const __m256 dw = TwoBlockScales(p, p + 34);
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      const int8_t* y = a.q + m * k + b * 32;
      const __m256i dot =
          AddDotI8(AddDotI8(_mm256_setzero_si256(), abs_lo, lo,
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y))),
                   abs_hi, hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + 32)));
      const __m256 scale = _mm256_mul_ps(dw, _mm256_loadu_ps(a.d4 + (m * nb + b) * 4));
      acc[m][slot] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(dot), acc[m][slot]);
    }
  });
  for (int m = 0; m < MR; ++m) sums[m] = HorizontalSum(_mm256_add_ps(acc[m][0], acc[m][1]));
  if (nb % 2 == 1) {
    // The odd last block, in order.
    const int64_t b = nb - 1;
    const uint8_t* p = w + b * 34;
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
    const __m256i abs_x = _mm256_sign_epi8(x, x);
    const float dw = BlockScale(p);
    for (int m = 0; m < MR; ++m) {
      const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + m * k + b * 32));
      sums[m] += dw * a.d[m * nb + b] *
                 HorizontalSum(_mm256_cvtepi32_ps(AddDotI8(_mm256_setzero_si256(), abs_x, x, y)));
    }
  }
}

// One q4_0 weight row { f16 d; u8 qs[16]; } (low nibbles values 0..15, high ones 16..31, each
// minus 8) against MR rows of int8 activations in their pair layout (Note [int8 activations]), two
// blocks per step: one 256-bit register holds both blocks' 16 bytes of nibbles; masked, they are
// the low nibbles of both, shifted and masked the high ones, which meet the activations' two
// interleaved 32-byte halves as they are. vpmaddubsw takes the unsigned nibbles n (pairs sum to
// at most 2 * 15 * 127); the two products add to 16 int16 of 4 values each, from which the
// precomputed 8 * (sum of those 4 activations) leaves sum((n - 8) y) exactly (|.| <= 4 * 8 * 127).
// One vpmaddwd, convert and FMA per pair of blocks then scales 4 lanes by each block's d_w * d_a.
// Its weights are prefetched as RowQ8_0's (kQ8_0PrefetchBytes).
template <int MR>
void RowQ4_0(const Int8Activations& a, int64_t k, const uint8_t* w, float* sums) {
  const int64_t nb = k / 32;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[MR][2];
  for (int m = 0; m < MR; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
  ForBlockPairs(nb / 2, [&](int64_t pair, int slot) SY_KERNEL_INLINE {
    const int64_t b = 2 * pair;
    const uint8_t* p = w + b * 18;
    PrefetchOnce(p, kQ8_0PrefetchBytes);
    const __m256i q = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 20)),
                                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2)));
    const __m256i lo = _mm256_and_si256(q, low4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    const __m256 dw = TwoBlockScales(p, p + 18);
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      const int8_t* y = a.q + m * k + b * 32;
      const __m256i products = _mm256_add_epi16(
          _mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y))),
          _mm256_maddubs_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + 32))));
      const __m256i offset =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.offsets + (m * nb + b) * 8));
      const __m256 dot =
          _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_sub_epi16(products, offset), ones));
      const __m256 scale = _mm256_mul_ps(dw, _mm256_loadu_ps(a.d4 + (m * nb + b) * 4));
      acc[m][slot] = _mm256_fmadd_ps(scale, dot, acc[m][slot]);
    }
  });
  for (int m = 0; m < MR; ++m) sums[m] = HorizontalSum(_mm256_add_ps(acc[m][0], acc[m][1]));
  if (nb % 2 == 1) {
    // The odd last block, in order: its low nibbles meet values 0..15, the high ones 16..31.
    const int64_t b = nb - 1;
    const uint8_t* p = w + b * 18;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    const __m128i lo = _mm_and_si128(q, _mm256_castsi256_si128(low4));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm256_castsi256_si128(low4));
    const float dw = BlockScale(p);
    for (int m = 0; m < MR; ++m) {
      const int8_t* y = a.q + m * k + b * 32;
      const __m128i products = _mm_add_epi16(
          _mm_maddubs_epi16(lo, _mm_loadu_si128(reinterpret_cast<const __m128i*>(y))),
          _mm_maddubs_epi16(hi, _mm_loadu_si128(reinterpret_cast<const __m128i*>(y + 16))));
      const __m128i offset =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.offsets + (m * nb + b) * 8));
      const __m128i dot =
          _mm_madd_epi16(_mm_sub_epi16(products, offset), _mm256_castsi256_si128(ones));
      __m128i s = _mm_add_epi32(dot, _mm_unpackhi_epi64(dot, dot));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
      sums[m] += dw * a.d[m * nb + b] * static_cast<float>(_mm_cvtsi128_si32(s));
    }
  }
}

// One q4_k weight row of super-blocks { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; } against MR
// rows of int8 activations in their pair layout (Note [int8 activations]). A super-block's 8
// sub-blocks of 32 meet 4 pairs of activation blocks; 32-byte chunk p of qs holds sub-block 2p in
// its low nibbles and 2p + 1 in its high ones, so each 16-byte half of the chunk, broadcast to both
// 128-bit lanes, shifted right by 0 bits in the low lane and 4 in the high one and masked, is
// [sub-block 2p values 0..15 | 2p+1 values 0..15] (or 16..31): the activations' pair as it is.
// vpmaddubsw takes the unsigned nibbles (the two halves add in int16 to at most 4 * 15 * 127),
// then vpmaddwd multiplies each lane by its sub-block's 6-bit scale sc_j, leaving 8 int32 sums
// sc_j * dot_j (4 lanes per sub-block). One convert and FMA with the activations' per-lane scales
// (d4) per pair accumulate a super-block, which d scales once. The minimums,
// -dmin * m_j * d_a * sum(y) per sub-block, take one FMA per super-block: the 8 dmin * m_j against
// the activation blocks' sums (Int8Activations::sums). Its weights are prefetched as RowQ8_0's.
// With kFive it is RowQ5_K (below).
template <int MR, bool kFive>
void RowQ4_K(const Int8Activations& a, int64_t k, const uint8_t* w, float* sums) {
  constexpr int64_t kBlockBytes = kFive ? 176 : 144;
  constexpr int64_t kQsOffset = kFive ? 48 : 16;
  const int64_t nb = k / 32;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i lane_shift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
  // vpshufb control putting byte 0 of each lane's 8 scale bytes into the low lane's 8 int16 and
  // byte 1 into the high lane's (0x80 zeroes the high bytes); + 2p picks pair p's scales.
  const __m256i pick_scales =
      _mm256_setr_epi8(0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 1,
                       -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128);
  __m256 acc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < k / 256; ++sb) {
    const uint8_t* block = w + sb * kBlockBytes;
    PrefetchOnce(block, kQ8_0PrefetchBytes);
    PrefetchOnce(block + 64, kQ8_0PrefetchBytes);
    PrefetchOnce(block + 128, kQ8_0PrefetchBytes);
    if constexpr (kFive) PrefetchOnce(block + 175, kQ8_0PrefetchBytes);
    // The 6-bit scales and minimums (Q4KScaleMin), four at a time: bytes 0..3 hold sc_0..3 and
    // 4..7 m_0..3 in their low 6 bits; sc_4..7 and m_4..7 are the low and high nibbles of bytes
    // 8..11 with bits 4..5 from the top 2 bits of bytes 0..3 and 4..7.
    uint32_t packed[3];
    std::memcpy(packed, block + 4, 12);
    const uint32_t sc_low = packed[0] & 0x3F3F3F3Fu, m_low = packed[1] & 0x3F3F3F3Fu;
    const uint32_t sc_high = (packed[2] & 0x0F0F0F0Fu) | ((packed[0] >> 2) & 0x30303030u);
    const uint32_t m_high = ((packed[2] >> 4) & 0x0F0F0F0Fu) | ((packed[1] >> 2) & 0x30303030u);
    const __m256i scale_bytes =
        _mm256_set1_epi64x(static_cast<int64_t>(sc_low | uint64_t{sc_high} << 32));
    const __m256 mins = _mm256_mul_ps(_mm256_set1_ps(BlockScale(block + 2)),
                                      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(
                                          static_cast<int64_t>(m_low | uint64_t{m_high} << 32)))));
    __m256 t[MR];
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      const uint8_t* qs = block + kQsOffset + 32 * p;
      __m256i w_lo = _mm256_and_si256(
          _mm256_srlv_epi32(
              _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs))),
              lane_shift),
          low4);
      __m256i w_hi = _mm256_and_si256(
          _mm256_srlv_epi32(_mm256_broadcastsi128_si256(
                                _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16))),
                            lane_shift),
          low4);
      if constexpr (kFive) {
        const __m256i bit_shift = _mm256_setr_epi32(2 * p, 2 * p, 2 * p, 2 * p, 2 * p + 1,
                                                    2 * p + 1, 2 * p + 1, 2 * p + 1);
        const auto fifth = [&](const uint8_t* qh) {
          const __m256i bits = _mm256_and_si256(
              _mm256_srlv_epi32(_mm256_broadcastsi128_si256(
                                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(qh))),
                                bit_shift),
              _mm256_set1_epi8(1));
          return _mm256_slli_epi16(bits, 4);
        };
        w_lo = _mm256_or_si256(w_lo, fifth(block + 16));
        w_hi = _mm256_or_si256(w_hi, fifth(block + 32));
      }
      const __m256i scales =
          _mm256_shuffle_epi8(scale_bytes, _mm256_add_epi8(pick_scales, _mm256_set1_epi8(2 * p)));
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) {
        const int8_t* y = a.q + m * k + sb * 256 + 64 * p;
        const __m256i products = _mm256_add_epi16(
            _mm256_maddubs_epi16(w_lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y))),
            _mm256_maddubs_epi16(w_hi,
                                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + 32))));
        const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(products, scales));
        const __m256 da = _mm256_loadu_ps(a.d4 + (m * nb + sb * 8 + 2 * p) * 4);
        t[m] = p == 0 ? _mm256_mul_ps(da, dot) : _mm256_fmadd_ps(da, dot, t[m]);
      }
    }
    const __m256 d = _mm256_set1_ps(BlockScale(block));
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      acc[m] = _mm256_fmadd_ps(d, t[m], acc[m]);
      acc[m] = _mm256_fnmadd_ps(mins, _mm256_loadu_ps(a.sums + m * nb + sb * 8), acc[m]);
    }
  }
  for (int m = 0; m < MR; ++m) sums[m] = HorizontalSum(acc[m]);
}

// One q5_k weight row of super-blocks { f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }
// against MR rows of int8 activations: RowQ4_K's computation (one of its functions, templated on
// the fifth bit) with each sub-block's fifth bit ORed in as 16. Sub-block s's fifth bits are bit s
// of qh[0..31]; for pair p the low lane's shift is 2p and the high lane's 2p + 1, so the same
// broadcast-and-shift that splits the nibbles brings each lane's bit to bit 0, masked to 1 and
// moved up to bit 4. The values reach 31: vpmaddubsw's two halves still add in int16 (at most
// 4 * 31 * 128).
template <int MR>
void RowQ5_K(const Int8Activations& a, int64_t k, const uint8_t* w, float* sums) {
  RowQ4_K<MR, true>(a, k, w, sums);
}

// vpshufb controls taking int16 lane `lo` of the low 128-bit lane and `hi` of the high one, 8
// times each, for (lo, hi) = (f + r, f + 2 + r) with f = 0, 4 and r = 0, 1 (kPickInt16[f / 2 + r]):
// the sub-blocks of a pair's registers (PickPairScales).
struct PickInt16Table {
  alignas(32) int8_t control[4][32];
  constexpr PickInt16Table() : control() {
    for (int t = 0; t < 4; ++t) {
      const int lo = 4 * (t / 2) + t % 2, hi = lo + 2;
      for (int i = 0; i < 32; ++i)
        control[t][i] = static_cast<int8_t>(2 * (i < 16 ? lo : hi) + i % 2);
    }
  }
};
constexpr PickInt16Table kPickInt16;

// Activation-block pair p (0..3) of a super-block of 16-value sub-blocks, as RowSixteens takes
// it: q[0] meets the activations' values 0..15 of blocks 2p and 2p + 1 ([block 2p | block 2p + 1]
// in the two 128-bit lanes), q[1] their values 16..31, as unsigned bytes; scale[r] the int16 scale
// of each lane's sub-block (16 values: sub-blocks 4p + r and 4p + 2 + r).
struct SixteensPair {
  __m256i q[2];
  __m256i scale[2];
};

// Both lanes' 8 int16 `values` of a half (sub-blocks 8 h .. 8 h + 7) picked for pair p's registers.
inline void PickPairScales(__m256i values, int p, __m256i out[2]) {
  for (int r = 0; r < 2; ++r) {
    out[r] = _mm256_shuffle_epi8(
        values,
        _mm256_load_si256(reinterpret_cast<const __m256i*>(kPickInt16.control[2 * (p % 2) + r])));
  }
}

// Bytes `bytes[0..15]` in both 128-bit lanes.
inline __m256i Broadcast16(const uint8_t* bytes) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)));
}

// v shifted right by `lo` bits in the low lane and `hi` in the high one (within 32-bit lanes: a
// byte's bits below 8 - shift are its own), masked by `mask` per byte.
inline __m256i ShiftMask(__m256i v, int lo, int hi, int mask) {
  return _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(lo, lo, lo, lo, hi, hi, hi, hi)),
                          _mm256_set1_epi8(static_cast<char>(mask)));
}

// q6_k { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; }: in half h, register r of pair p takes
// ql[16 r ..] (low lane) and ql[32 + 16 r ..] (high lane), low nibbles for even p and high ones
// for odd, and 2 bits of qh[16 r ..] at shifts 4 (p % 2) and 4 (p % 2) + 2; the 6-bit values stand
// for q - 32.
struct Q6KPairs {
  static constexpr int64_t kBlockBytes = 210;
  const uint8_t* block;
  float d() const { return BlockScale(block + 208); }
  // The 16 sub-blocks' scale * 32, which the stored values' offset takes away, scaled by d.
  __m256i Correction() const {
    return _mm256_slli_epi16(
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 192))), 5);
  }
  float correction_scale() const { return d(); }
  // Pairs 2 half and 2 half + 1: one load of the half's ql and qh serves both.
  void Half(int half, SixteensPair out[2]) const {
    const uint8_t* ql = block + 64 * half;
    const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
    const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
    const __m256i qh =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 128 + 32 * half));
    const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
    // [ql 16 r .. | ql 32 + 16 r ..]; qh[16 r ..] in both lanes (the permutes take immediates).
    const __m256i ql_lanes[2] = {_mm256_permute2x128_si256(ql0, ql1, 0x20),
                                 _mm256_permute2x128_si256(ql0, ql1, 0x31)};
    const __m256i qh_lanes[2] = {_mm256_permute2x128_si256(qh, qh, 0x00),
                                 _mm256_permute2x128_si256(qh, qh, 0x11)};
    for (int r = 0; r < 2; ++r) {
      const __m256i bytes = ql_lanes[r], high = qh_lanes[r];
      // qh bits 2j, 2j + 1 moved to bits 4, 5: j = 0, 1 (pair 2 half) and 2, 3 (2 half + 1).
      out[0].q[r] = _mm256_or_si256(
          _mm256_and_si256(bytes, low4),
          _mm256_and_si256(_mm256_sllv_epi32(high, _mm256_setr_epi32(4, 4, 4, 4, 2, 2, 2, 2)),
                           bits45));
      out[1].q[r] = _mm256_or_si256(
          _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4),
          _mm256_and_si256(_mm256_srlv_epi32(high, _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2)),
                           bits45));
    }
    int64_t scale_bits;
    std::memcpy(&scale_bits, block + 192 + 8 * half, 8);
    const __m256i scales =
        _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_cvtsi64_si128(scale_bits)));
    PickPairScales(scales, 0, out[0].scale);
    PickPairScales(scales, 1, out[1].scale);
  }
};

// q3_k { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; }: in half h, register r of pair p takes
// 2 bits of qs[32 h + 16 r ..] at shifts 4 (p % 2) and 4 (p % 2) + 2, and as bit 2 the bits
// 4 h + 2 (p % 2) and 4 h + 2 (p % 2) + 1 of hmask[16 r ..]; the 3-bit values stand for q - 4 (a
// clear hmask bit subtracts 4). Scales are 6 bits minus 32 (Q3KScale).
struct Q3KPairs {
  static constexpr int64_t kBlockBytes = 110;
  // The 16 scales minus 32 (Q3KScale), unpacked once per super-block as ggml does: 32-bit words
  // of the 12 bytes give 4 scales at a time, low nibbles and 2-bit pieces moved into place.
  explicit Q3KPairs(const uint8_t* b) : block(b) {
    uint32_t aux[4];
    std::memcpy(aux, block + 96, 12);
    const uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & 0x0F0F0F0Fu) | (((tmp >> 4) & 0x03030303u) << 4);
    aux[3] = ((aux[1] >> 4) & 0x0F0F0F0Fu) | (((tmp >> 6) & 0x03030303u) << 4);
    aux[0] = (aux[0] & 0x0F0F0F0Fu) | (((tmp >> 0) & 0x03030303u) << 4);
    aux[1] = (aux[1] & 0x0F0F0F0Fu) | (((tmp >> 2) & 0x03030303u) << 4);
    scales =
        _mm_sub_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(aux)), _mm_set1_epi8(32));
  }
  const uint8_t* block;
  __m128i scales;  // int8 scale - 32 of sub-blocks 0..15
  float d() const { return BlockScale(block + 108); }
  // The 16 sub-blocks' (scale - 32) * 4, which the stored values' offset takes away, scaled by d.
  __m256i Correction() const { return _mm256_slli_epi16(_mm256_cvtepi8_epi16(scales), 2); }
  float correction_scale() const { return d(); }
  // Pairs 2 half and 2 half + 1.
  void Half(int half, SixteensPair out[2]) const {
    const uint8_t* qs = block + 32 + 32 * half;
    for (int r = 0; r < 2; ++r) {
      const __m256i low = Broadcast16(qs + 16 * r);
      const __m256i high = Broadcast16(block + 16 * r);
      for (int odd = 0; odd < 2; ++odd) {
        out[odd].q[r] = _mm256_or_si256(
            ShiftMask(low, 4 * odd, 4 * odd + 2, 3),
            _mm256_slli_epi16(ShiftMask(high, 4 * half + 2 * odd, 4 * half + 2 * odd + 1, 1), 2));
      }
    }
    const __m128i half_scales = half == 0 ? scales : _mm_unpackhi_epi64(scales, scales);
    const __m256i wide = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(half_scales));
    PickPairScales(wide, 0, out[0].scale);
    PickPairScales(wide, 1, out[1].scale);
  }
};

// q2_k { u8 scales[16]; u8 qs[64]; f16 d; f16 dmin; }: in half h, register r of pair p takes 2 bits
// of qs[32 h + 16 r ..] at shifts 4 (p % 2) and 4 (p % 2) + 2; sub-block s's scale is the low
// nibble of scales[s] and its minimum the high one: x = d * sc * q - dmin * m.
struct Q2KPairs {
  static constexpr int64_t kBlockBytes = 84;
  const uint8_t* block;
  float d() const { return BlockScale(block + 80); }
  // The 16 sub-blocks' minimums, scaled by dmin.
  __m256i Correction() const {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block));
    return _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F)));
  }
  float correction_scale() const { return BlockScale(block + 82); }
  // Pairs 2 half and 2 half + 1.
  void Half(int half, SixteensPair out[2]) const {
    const uint8_t* qs = block + 16 + 32 * half;
    for (int r = 0; r < 2; ++r) {
      const __m256i bytes = Broadcast16(qs + 16 * r);
      for (int odd = 0; odd < 2; ++odd) out[odd].q[r] = ShiftMask(bytes, 4 * odd, 4 * odd + 2, 3);
    }
    const __m128i packed = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 8 * half));
    const __m256i wide =
        _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_and_si128(packed, _mm_set1_epi8(0x0F))));
    PickPairScales(wide, 0, out[0].scale);
    PickPairScales(wide, 1, out[1].scale);
  }
};

// One weight row of a k-quant with 16-value sub-blocks (q6_k, q3_k, q2_k: `Pairs`) against MR rows
// of int8 activations in their pair layout (Note [int8 activations]). Each 16-value sub-block has
// its own scale, so each of a pair's two registers is scaled on its own in vpmaddwd: vpmaddubsw
// takes the unsigned stored values u (pairs at most 2 * 63 * 128 in int16), vpmaddwd by the lanes'
// scales leaves 8 int32 sums, 4 per activation block, which one convert and FMA scale by the
// activations' per-lane d4. What the stored values leave out (q6_k's and q3_k's offsets, q2_k's
// minimums) is, per sub-block, a constant c times the sum of its 16 activations: one vpmaddwd of
// the super-block's 16 c (Pairs::Correction) with the activations' 16 sums (Int8Activations::
// sums16) gives it per activation block, scaled by the 8 blocks' d and subtracted once per
// super-block, times d (offsets) or dmin (minimums): ggml's bsums, per block of 32.
template <int MR, typename Pairs>
void RowSixteens(const Int8Activations& a, int64_t k, const uint8_t* w, float* sums) {
  const int64_t nb = k / 32;
  __m256 acc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < k / 256; ++sb) {
    const Pairs pairs{w + sb * Pairs::kBlockBytes};
    for (int64_t at = 0; at < Pairs::kBlockBytes; at += 64) {
      PrefetchOnce(pairs.block + at, kQ8_0PrefetchBytes);
    }
    __m256 t[MR];
    SixteensPair half_pairs[2];
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      if (p % 2 == 0) pairs.Half(p / 2, half_pairs);
      const SixteensPair& pair = half_pairs[p % 2];
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) {
        const int8_t* y = a.q + m * k + sb * 256 + 64 * p;
        const __m256i p0 = _mm256_maddubs_epi16(
            pair.q[0], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y)));
        const __m256i p1 = _mm256_maddubs_epi16(
            pair.q[1], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + 32)));
        const __m256 dot = _mm256_cvtepi32_ps(_mm256_add_epi32(
            _mm256_madd_epi16(p0, pair.scale[0]), _mm256_madd_epi16(p1, pair.scale[1])));
        const __m256 da = _mm256_loadu_ps(a.d4 + (m * nb + sb * 8 + 2 * p) * 4);
        t[m] = p == 0 ? _mm256_mul_ps(da, dot) : _mm256_fmadd_ps(da, dot, t[m]);
      }
    }
    const __m256i correction = pairs.Correction();
    const __m256 d = _mm256_set1_ps(pairs.d());
    const __m256 c = _mm256_set1_ps(pairs.correction_scale());
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      const __m256i s16 =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.sums16 + (m * nb + sb * 8) * 2));
      const __m256 per_block =
          _mm256_mul_ps(_mm256_loadu_ps(a.d + m * nb + sb * 8),
                        _mm256_cvtepi32_ps(_mm256_madd_epi16(s16, correction)));
      acc[m] = _mm256_fmadd_ps(d, t[m], acc[m]);
      acc[m] = _mm256_fnmadd_ps(c, per_block, acc[m]);
    }
  }
  for (int m = 0; m < MR; ++m) sums[m] = HorizontalSum(acc[m]);
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
void Rows(DType dtype, const Int8Activations& qa, int64_t k, const uint8_t* w, float* c,
          int64_t ldc, float alpha, float beta, int64_t row_begin, int64_t row_end) {
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
      RowQ4_K<MR, false>(qa, k, row, sums);
    } else if (dtype == DType::kQ5_K) {
      RowQ5_K<MR>(qa, k, row, sums);
    } else if (dtype == DType::kQ6_K) {
      RowSixteens<MR, Q6KPairs>(qa, k, row, sums);
    } else if (dtype == DType::kQ3_K) {
      RowSixteens<MR, Q3KPairs>(qa, k, row, sums);
    } else {  // q2_k: QuantGemvRows admits the quantized dtypes only
      RowSixteens<MR, Q2KPairs>(qa, k, row, sums);
    }
#else
    RowInt8Generic<MR>(dtype, qa, k, row, sums);
#endif
    for (int m = 0; m < MR; ++m) {
      float* dst = c + m * ldc + r;
      *dst = Finish(sums[m], alpha, beta, dst);
    }
  }
}

}  // namespace

// Note [int8 activations]
// A q4_0 block stores values 0..15 in the low nibbles of its 16 bytes and 16..31 in the high
// ones; a q8_0 block's 32 bytes are values 0..15 then 16..31. For two blocks side by side in
// 256-bit registers, masking the q4_0 bytes gives [values 0..15 of block b | of block b + 1] and
// shifting [16..31 of b | of b + 1]; q8_0 loads the same two halves, and q4_k the same from the
// two sub-blocks of one 32-byte chunk (RowQ4_K). The activations are stored
// to match, per pair of blocks [b 0..15 | b+1 0..15 | b 16..31 | b+1 16..31]
// (Int8ActivationIndex), so no lane crosses in the kernels, and d4 gives each block's scale for
// its 4 lanes of the 8 int32 sums. q4_0's nibbles are unsigned (0..15) where its values are
// n - 8: offsets[8 b + j] = 8 * (q[2j] + q[2j+1] + q[16+2j] + q[17+2j]) of block b (in order),
// the amount the 16-bit lane j of vpmaddubsw(low) + vpmaddubsw(high) exceeds sum((n - 8) q) by.
// q4_k's (and q5_k's) values are d * sc * n - dmin * m: sums[b] = d[b] * sum(q) of block b, which
// the sub-block's dmin * m multiplies.
void QuantizeActivations(const float* a, int64_t rows, int64_t k, int8_t* q, float* d, float* d4,
                         int16_t* offsets, float* sums, int16_t* sums16) {
  SY_CHECK(k % 32 == 0) << "QuantizeActivations: rows of " << k << " values";
  const int64_t blocks = rows * k / 32;
#if defined(__AVX2__) && defined(__FMA__)
  for (int64_t b = 0; b < blocks; ++b) QuantizeActivationBlock(a + b * 32, q + b * 32, d + b);
#else
  RoundActivationBlocks(a, rows * k, q, d);
#endif
  for (int64_t b = 0; b < blocks; ++b) {
    for (int j = 0; j < 4; ++j) d4[b * 4 + j] = d[b];
    const int8_t* x = q + b * 32;
    int32_t sum = 0;
    for (int j = 0; j < 8; ++j) {
      const int32_t four = x[2 * j] + x[2 * j + 1] + x[16 + 2 * j] + x[17 + 2 * j];
      offsets[b * 8 + j] = static_cast<int16_t>(8 * four);
      sum += four;
    }
    sums[b] = d[b] * static_cast<float>(sum);
    for (int h = 0; h < 2; ++h) {
      int32_t half = 0;
      for (int i = 0; i < 16; ++i) half += x[16 * h + i];
      sums16[b * 2 + h] = static_cast<int16_t>(half);
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

void QuantGemvRows(DType dtype, const Int8Activations& qa, int64_t rows, int64_t k, const void* w,
                   float* c, int64_t ldc, float alpha, float beta, int64_t row_begin,
                   int64_t row_end) {
  SY_CHECK(IsQuantized(dtype)) << "QuantGemvRows on " << DTypeName(dtype);
  SY_CHECK(k % DTypeBlockSize(dtype) == 0)
      << "QuantGemvRows: rows of " << k << " values are not whole " << DTypeName(dtype)
      << " blocks";
  SY_CHECK(rows >= 1) << "QuantGemvRows: " << rows << " activation rows";
  SY_CHECK(qa.q != nullptr && qa.d != nullptr && qa.d4 != nullptr &&
           (dtype != DType::kQ4_0 || qa.offsets != nullptr) &&
           ((dtype != DType::kQ4_K && dtype != DType::kQ5_K) || qa.sums != nullptr) &&
           ((dtype != DType::kQ6_K && dtype != DType::kQ3_K && dtype != DType::kQ2_K) ||
            qa.sums16 != nullptr))
      << "QuantGemvRows: " << DTypeName(dtype) << " without its activations";
  const auto* wb = static_cast<const uint8_t*>(w);
  // Up to 4 activation rows per pass over the row range; the caller (cpu_gemm.cc GemvTransB)
  // hands over ranges of at most 64 KiB of weights when there are more than 4 rows, so the range is
  // still in L2 for the next 4.
  const int64_t nb = k / 32;
  for (int64_t m0 = 0; m0 < rows; m0 += 4) {
    const Int8Activations qm{qa.q + m0 * k,
                             qa.d + m0 * nb,
                             qa.d4 + m0 * nb * 4,
                             qa.offsets != nullptr ? qa.offsets + m0 * nb * 8 : nullptr,
                             qa.sums != nullptr ? qa.sums + m0 * nb : nullptr,
                             qa.sums16 != nullptr ? qa.sums16 + m0 * nb * 2 : nullptr};
    float* cm = c + m0 * ldc;
    switch (std::min<int64_t>(4, rows - m0)) {
      case 1:
        Rows<1>(dtype, qm, k, wb, cm, ldc, alpha, beta, row_begin, row_end);
        break;
      case 2:
        Rows<2>(dtype, qm, k, wb, cm, ldc, alpha, beta, row_begin, row_end);
        break;
      case 3:
        Rows<3>(dtype, qm, k, wb, cm, ldc, alpha, beta, row_begin, row_end);
        break;
      default:
        Rows<4>(dtype, qm, k, wb, cm, ldc, alpha, beta, row_begin, row_end);
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
