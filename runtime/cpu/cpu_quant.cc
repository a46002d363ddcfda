#include "runtime/cpu/cpu_quant.h"

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

#if defined(__AVX2__) && defined(__FMA__)

inline __m256 Widen8(__m128i q) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)); }
// Eight int8 at p, widened to f32 (the load folds into vpmovsxbd).
inline __m256 Load8(const uint8_t* p) {
  return Widen8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

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

// One block of 32 integer weights (as f32, unscaled) against MR activation rows: the block's dot
// product t, then acc += d * t, so the scale costs one FMA per row; blocks are independent until
// that last FMA, which alternates between two accumulators (ForBlockPairs).
template <int MR>
inline void AccumulateScaledBlock(const float* a, int64_t k, int64_t offset, __m256 w0, __m256 w1,
                                  __m256 w2, __m256 w3, __m256 d, __m256 (&acc)[MR][4], int slot) {
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) {
    const float* x = a + m * k + offset;
    __m256 t = _mm256_mul_ps(w0, _mm256_loadu_ps(x));
    t = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), t);
    t = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x + 16), t);
    t = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x + 24), t);
    acc[m][slot] = _mm256_fmadd_ps(d, t, acc[m][slot]);
  }
}

// body(b, slot) for b in [0, blocks): even blocks on accumulator slot 0, odd ones on slot 1.
template <typename Body>
inline void ForBlockPairs(int64_t blocks, const Body& body) {
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    body(b, 0);
    body(b + 1, 1);
  }
  if (b < blocks) body(b, 0);
}

template <int MR>
inline void Reduce(__m256 (&acc)[MR][4], float* sums) {
  for (int m = 0; m < MR; ++m) {
    const __m256 s =
        _mm256_add_ps(_mm256_add_ps(acc[m][0], acc[m][1]), _mm256_add_ps(acc[m][2], acc[m][3]));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    sums[m] = _mm_cvtss_f32(h);
  }
}

// q8_0 { f16 d; i8 qs[32]; }
template <int MR>
void RowQ8_0(const float* a, int64_t k, const uint8_t* w, float* sums) {
  __m256 acc[MR][4];
  for (int m = 0; m < MR; ++m) {
    for (int j = 0; j < 4; ++j) acc[m][j] = _mm256_setzero_ps();
  }
  auto block = [&](int64_t b, int slot) {
    const uint8_t* q = w + b * 34;
    AccumulateScaledBlock<MR>(a, k, b * 32, Load8(q + 2), Load8(q + 10), Load8(q + 18),
                              Load8(q + 26), _mm256_set1_ps(BlockScale(q)), acc, slot);
  };
  ForBlockPairs(k / 32, block);
  Reduce<MR>(acc, sums);
}

// q4_0 { f16 d; u8 qs[16]; }: the low nibbles are values 0..15, the high ones 16..31, each minus 8.
template <int MR>
void RowQ4_0(const float* a, int64_t k, const uint8_t* w, float* sums) {
  __m256 acc[MR][4];
  for (int m = 0; m < MR; ++m) {
    for (int j = 0; j < 4; ++j) acc[m][j] = _mm256_setzero_ps();
  }
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m128i eight = _mm_set1_epi8(8);
  auto block = [&](int64_t b, int slot) {
    const uint8_t* p = w + b * 18;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, low4), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), low4), eight);
    AccumulateScaledBlock<MR>(a, k, b * 32, Widen8(lo), Widen8(_mm_unpackhi_epi64(lo, lo)),
                              Widen8(hi), Widen8(_mm_unpackhi_epi64(hi, hi)),
                              _mm256_set1_ps(BlockScale(p)), acc, slot);
  };
  ForBlockPairs(k / 32, block);
  Reduce<MR>(acc, sums);
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

#endif

template <int MR>
void Rows(DType dtype, const float* a, int64_t k, const uint8_t* w, float* c, int64_t ldc,
          float alpha, float beta, int64_t row_begin, int64_t row_end) {
  const size_t row_bytes = DTypeBytes(dtype, k);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w + static_cast<size_t>(r) * row_bytes;
    float sums[MR];
#if defined(__AVX2__) && defined(__FMA__)
    if (dtype == DType::kQ8_0) {
      RowQ8_0<MR>(a, k, row, sums);
    } else if (dtype == DType::kQ4_0) {
      RowQ4_0<MR>(a, k, row, sums);
    } else if (dtype == DType::kQ4_K) {
      RowQ4_K<MR>(a, k, row, sums);
    } else {
      RowGeneric<MR>(dtype, a, k, row, sums);
    }
#else
    RowGeneric<MR>(dtype, a, k, row, sums);
#endif
    for (int m = 0; m < MR; ++m) {
      float* dst = c + m * ldc + r;
      *dst = Finish(sums[m], alpha, beta, dst);
    }
  }
}

}  // namespace

void QuantGemvRows(DType dtype, const float* a, int64_t rows, int64_t k, const void* w, float* c,
                   int64_t ldc, float alpha, float beta, int64_t row_begin, int64_t row_end) {
  SY_CHECK(IsQuantized(dtype)) << "QuantGemvRows on " << DTypeName(dtype);
  SY_CHECK(k % DTypeBlockSize(dtype) == 0)
      << "QuantGemvRows: rows of " << k << " values are not whole " << DTypeName(dtype)
      << " blocks";
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (rows) {
    case 1:
      return Rows<1>(dtype, a, k, wb, c, ldc, alpha, beta, row_begin, row_end);
    case 2:
      return Rows<2>(dtype, a, k, wb, c, ldc, alpha, beta, row_begin, row_end);
    case 3:
      return Rows<3>(dtype, a, k, wb, c, ldc, alpha, beta, row_begin, row_end);
    case 4:
      return Rows<4>(dtype, a, k, wb, c, ldc, alpha, beta, row_begin, row_end);
    default:
      SY_CHECK(false) << "QuantGemvRows: " << rows << " activation rows (1 to 4)";
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
