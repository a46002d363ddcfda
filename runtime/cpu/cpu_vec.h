// Private to runtime/cpu: one small SIMD vocabulary so each CPU kernel is written once and compiles
// to AVX-512, AVX2+FMA+F16C, or plain scalar code, whichever the build targets (-march=native).
//
//   VecF         a register of kLanes floats
//   VLoad(p)     loads kLanes values from float, BF16 or F16 memory, widened to f32 in registers
//   VLoadPairs(p, &even, &odd)
//                loads 2 * kLanes BF16 values and widens them without a shuffle: even gets
//                p[0], p[2], ..., odd gets p[1], p[3], ... (a bf16 is the high half of its f32,
//                so each 32-bit word gives its low value by a shift and its high one by a mask)
//   VExp(x)      e^x to about 1 ulp (Cephes polynomial), for x in [-87, 88]; below that 0
//
// Also holds the scalar row helpers built on it (Dot, row sums, widening a row of weights) and
// PrefetchOnce, the prefetch of weights read once.
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "runtime/core/dtype.h"
#include "runtime/cpu/weight_prefetch.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace sy::cpu {

#if defined(__AVX512F__)

// Several unmasked AVX-512 intrinsics trip gcc 12's -Wmaybe-uninitialized (its headers seed them
// with an "undefined" register, PR 105593), so this block uses the full-mask forms with a defined
// source, which compute the same thing.
inline constexpr int kLanes = 16;
using VecF = __m512;

inline VecF VZero() { return _mm512_setzero_ps(); }
inline VecF VSet1(float x) { return _mm512_set1_ps(x); }
inline VecF VLoad(const float* p) { return _mm512_loadu_ps(p); }
inline VecF VLoad(const BF16* p) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(
      _mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, h), 16));
}
inline VecF VLoad(const F16* p) {
  return _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline void VLoadPairs(const BF16* p, VecF* even, VecF* odd) {
  __m512i w = _mm512_loadu_si512(p);
  *even = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, w, 16));
  *odd = _mm512_castsi512_ps(_mm512_maskz_and_epi32(0xffff, w, _mm512_set1_epi32(-65536)));
}
inline void VStore(float* p, VecF v) { _mm512_storeu_ps(p, v); }
inline VecF VAdd(VecF a, VecF b) { return _mm512_add_ps(a, b); }
inline VecF VSub(VecF a, VecF b) { return _mm512_sub_ps(a, b); }
inline VecF VMul(VecF a, VecF b) { return _mm512_mul_ps(a, b); }
inline VecF VDiv(VecF a, VecF b) { return _mm512_div_ps(a, b); }
inline VecF VMax(VecF a, VecF b) { return _mm512_mask_max_ps(a, 0xffff, a, b); }
inline VecF VMin(VecF a, VecF b) { return _mm512_mask_min_ps(a, 0xffff, a, b); }
// a * b + c
inline VecF VFma(VecF a, VecF b, VecF c) { return _mm512_fmadd_ps(a, b, c); }
inline __m256 LowHalf(VecF v) {
  return _mm256_castpd_ps(
      _mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xf, _mm512_castps_pd(v), 0));
}
inline __m256 HighHalf(VecF v) {
  return _mm256_castpd_ps(
      _mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xf, _mm512_castps_pd(v), 1));
}
inline float VReduceAdd(VecF v) {
  __m256 h = _mm256_add_ps(LowHalf(v), HighHalf(v));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float VReduceMax(VecF v) {
  __m256 h = _mm256_max_ps(LowHalf(v), HighHalf(v));
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
// The four sums of a, b, c, d in out[0..3].
inline void VReduceAdd4(VecF a, VecF b, VecF c, VecF d, float* out) {
  __m256 a8 = _mm256_add_ps(LowHalf(a), HighHalf(a)), b8 = _mm256_add_ps(LowHalf(b), HighHalf(b));
  __m256 c8 = _mm256_add_ps(LowHalf(c), HighHalf(c)), d8 = _mm256_add_ps(LowHalf(d), HighHalf(d));
  __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a8, b8), _mm256_hadd_ps(c8, d8));
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
}
inline VecF VRound(VecF v) {
  return _mm512_mask_roundscale_ps(v, 0xffff, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// v * 2^n for integral n in [-126, 127].
inline VecF VLdexp(VecF v, VecF n) { return _mm512_mask_scalef_ps(v, 0xffff, v, n); }

#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

inline constexpr int kLanes = 8;
using VecF = __m256;

inline VecF VZero() { return _mm256_setzero_ps(); }
inline VecF VSet1(float x) { return _mm256_set1_ps(x); }
inline VecF VLoad(const float* p) { return _mm256_loadu_ps(p); }
inline VecF VLoad(const BF16* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline VecF VLoad(const F16* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline void VLoadPairs(const BF16* p, VecF* even, VecF* odd) {
  __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  // Keeps w in a register: without this GCC 12 folds the load into the vpand as well, so every
  // weight is loaded twice (a 256-bit load is two micro-ops on Zen 1). One thread, weights in L2
  // (runtime_ops_bench BM_GemmBackend/bf16/1/128/1024): 12.5-13.4 -> 12.0-12.7 us.
  __asm__("" : "+x"(w));
  *even = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  *odd = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(-65536)));
}
inline void VStore(float* p, VecF v) { _mm256_storeu_ps(p, v); }
inline VecF VAdd(VecF a, VecF b) { return _mm256_add_ps(a, b); }
inline VecF VSub(VecF a, VecF b) { return _mm256_sub_ps(a, b); }
inline VecF VMul(VecF a, VecF b) { return _mm256_mul_ps(a, b); }
inline VecF VDiv(VecF a, VecF b) { return _mm256_div_ps(a, b); }
inline VecF VMax(VecF a, VecF b) { return _mm256_max_ps(a, b); }
inline VecF VMin(VecF a, VecF b) { return _mm256_min_ps(a, b); }
inline VecF VFma(VecF a, VecF b, VecF c) { return _mm256_fmadd_ps(a, b, c); }
inline float VReduceAdd(VecF v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float VReduceMax(VecF v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline void VReduceAdd4(VecF a, VecF b, VecF c, VecF d, float* out) {
  __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
}
inline VecF VRound(VecF v) {
  return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline VecF VLdexp(VecF v, VecF n) {
  __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(v, _mm256_castsi256_ps(bits));
}

#else

inline constexpr int kLanes = 1;
using VecF = float;

inline VecF VZero() { return 0.0f; }
inline VecF VSet1(float x) { return x; }
inline VecF VLoad(const float* p) { return *p; }
inline VecF VLoad(const BF16* p) { return BF16ToF32(*p); }
inline VecF VLoad(const F16* p) { return F16ToF32(*p); }
inline void VLoadPairs(const BF16* p, VecF* even, VecF* odd) {
  *even = BF16ToF32(p[0]);
  *odd = BF16ToF32(p[1]);
}
inline void VStore(float* p, VecF v) { *p = v; }
inline VecF VAdd(VecF a, VecF b) { return a + b; }
inline VecF VSub(VecF a, VecF b) { return a - b; }
inline VecF VMul(VecF a, VecF b) { return a * b; }
inline VecF VDiv(VecF a, VecF b) { return a / b; }
inline VecF VMax(VecF a, VecF b) { return std::max(a, b); }
inline VecF VMin(VecF a, VecF b) { return std::min(a, b); }
inline VecF VFma(VecF a, VecF b, VecF c) { return std::fma(a, b, c); }
inline float VReduceAdd(VecF v) { return v; }
inline float VReduceMax(VecF v) { return v; }
inline void VReduceAdd4(VecF a, VecF b, VecF c, VecF d, float* out) {
  out[0] = a;
  out[1] = b;
  out[2] = c;
  out[3] = d;
}
inline VecF VRound(VecF v) { return std::nearbyint(v); }
inline VecF VLdexp(VecF v, VecF n) { return std::ldexp(v, static_cast<int>(n)); }

#endif

// Prefetches the cache line `ahead` bytes past p, for weights that a decode step reads once, with
// the hint chosen for this CPU (weight_prefetch.h). With the non-temporal hint (prefetchnta, AMD)
// streaming hundreds of megabytes of weights stops evicting what the rest of the step reuses: the
// activations, the KV cache, the code, the tensors' bookkeeping. On this repository's Zen 1 test
// machine the time a decode step spends outside its parallel regions fell from 1.1-1.4 to
// 0.6-1.0 ms, and every alternated run got faster: bf16 2-26%, q8_0 5-9%, q4_0 1-5%
// (benchmarks/inference-results.md, session 20). On an Intel Xeon the same hint halved the
// weights' DRAM rate, and the ordinary one (prefetcht0) is the fastest (session 23).
// The address is formed as an integer, so no pointer leaves its array; past the end of the
// weights it pulls in a few unrelated lines, harmlessly (a prefetch never faults).
inline void PrefetchOnce(const void* p, int64_t ahead) {
  const void* line =
      reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(ahead));
  switch (internal::kWeightPrefetch) {
    case WeightPrefetch::kNonTemporal:
      __builtin_prefetch(line, 0, 0);
      return;
    case WeightPrefetch::kTemporal:
      __builtin_prefetch(line, 0, 3);
      return;
    case WeightPrefetch::kNone:
      return;
  }
}

// Scalar loads matching VLoad, for loop tails.
inline float SLoad(const float* p) { return *p; }
inline float SLoad(const BF16* p) { return BF16ToF32(*p); }
inline float SLoad(const F16* p) { return F16ToF32(*p); }

// e^x. Cephes expf: x = n ln2 + r with |r| <= ln2/2, a degree-6 polynomial for e^r, then 2^n.
// Inputs are clamped to [-87.3, 88.3]; below -87.3 the result is flushed to 0 (softmax and
// sigmoid only ever need it to vanish there). NaN stays NaN, so a bad logit is not hidden.
inline VecF VExp(VecF x) {
  const VecF lo = VSet1(-87.3f);
  VecF xc = VMin(VMax(x, lo), VSet1(88.3f));
  VecF n = VRound(VMul(xc, VSet1(1.44269504088896341f)));
  VecF r = VFma(n, VSet1(-0.693359375f), xc);
  r = VFma(n, VSet1(2.12194440e-4f), r);
  VecF p = VSet1(1.9875691500e-4f);
  p = VFma(p, r, VSet1(1.3981999507e-3f));
  p = VFma(p, r, VSet1(8.3334519073e-3f));
  p = VFma(p, r, VSet1(4.1665795894e-2f));
  p = VFma(p, r, VSet1(1.6666665459e-1f));
  p = VFma(p, r, VSet1(5.0000001201e-1f));
  VecF r2 = VMul(r, r);
  VecF y = VAdd(VFma(p, r2, r), VSet1(1.0f));
  y = VLdexp(y, n);
#if defined(__AVX512F__)
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), y, VZero());
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  y = _mm256_blendv_ps(y, VZero(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
#else
  if (std::isnan(x)) return x;
  return x < lo ? 0.0f : y;
#endif
}

inline float SExp(float x) { return std::exp(x); }

// sum_i a[i] * b[i].
template <typename T>
inline float Dot(const float* a, const T* b, int64_t n) {
  VecF acc0 = VZero(), acc1 = VZero();
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    acc0 = VFma(VLoad(a + i), VLoad(b + i), acc0);
    acc1 = VFma(VLoad(a + i + kLanes), VLoad(b + i + kLanes), acc1);
  }
  for (; i + kLanes <= n; i += kLanes) acc0 = VFma(VLoad(a + i), VLoad(b + i), acc0);
  float sum = VReduceAdd(VAdd(acc0, acc1));
  for (; i < n; ++i) sum += a[i] * SLoad(b + i);
  return sum;
}

// out[i] = a . rows[i] for four rows of length n.
inline void Dot4(const float* a, const float* const rows[4], int64_t n, float* out) {
  VecF acc0 = VZero(), acc1 = VZero(), acc2 = VZero(), acc3 = VZero();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    VecF av = VLoad(a + i);
    acc0 = VFma(av, VLoad(rows[0] + i), acc0);
    acc1 = VFma(av, VLoad(rows[1] + i), acc1);
    acc2 = VFma(av, VLoad(rows[2] + i), acc2);
    acc3 = VFma(av, VLoad(rows[3] + i), acc3);
  }
  VReduceAdd4(acc0, acc1, acc2, acc3, out);
  for (; i < n; ++i) {
    for (int r = 0; r < 4; ++r) out[r] += a[i] * rows[r][i];
  }
}

// y[i] += alpha * x[i].
inline void AxpyRow(float alpha, const float* x, float* y, int64_t n) {
  VecF va = VSet1(alpha);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) VStore(y + i, VFma(va, VLoad(x + i), VLoad(y + i)));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

inline float SumRow(const float* x, int64_t n) {
  VecF acc0 = VZero(), acc1 = VZero();
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    acc0 = VAdd(acc0, VLoad(x + i));
    acc1 = VAdd(acc1, VLoad(x + i + kLanes));
  }
  for (; i + kLanes <= n; i += kLanes) acc0 = VAdd(acc0, VLoad(x + i));
  float sum = VReduceAdd(VAdd(acc0, acc1));
  for (; i < n; ++i) sum += x[i];
  return sum;
}

inline float SumSquaresRow(const float* x, int64_t n) {
  VecF acc0 = VZero(), acc1 = VZero();
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    VecF a = VLoad(x + i), b = VLoad(x + i + kLanes);
    acc0 = VFma(a, a, acc0);
    acc1 = VFma(b, b, acc1);
  }
  for (; i + kLanes <= n; i += kLanes) {
    VecF a = VLoad(x + i);
    acc0 = VFma(a, a, acc0);
  }
  float sum = VReduceAdd(VAdd(acc0, acc1));
  for (; i < n; ++i) sum += x[i] * x[i];
  return sum;
}

// Largest element; n >= 1.
inline float MaxRow(const float* x, int64_t n) {
  int64_t i = 0;
  float best = x[0];
  if (n >= kLanes) {
    VecF acc = VLoad(x);
    for (i = kLanes; i + kLanes <= n; i += kLanes) acc = VMax(acc, VLoad(x + i));
    best = VReduceMax(acc);
  }
  for (; i < n; ++i) best = std::max(best, x[i]);
  return best;
}

// out[i] = e^(x[i] - shift); returns the sum of out.
inline float ExpShiftRow(const float* x, float shift, float* out, int64_t n) {
  VecF vs = VSet1(shift), acc = VZero();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    VecF e = VExp(VSub(VLoad(x + i), vs));
    VStore(out + i, e);
    acc = VAdd(acc, e);
  }
  float sum = VReduceAdd(acc);
  for (; i < n; ++i) {
    out[i] = SExp(x[i] - shift);
    sum += out[i];
  }
  return sum;
}

// Widens n weights to f32.
template <typename T>
inline void WidenRow(const T* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) VStore(dst + i, VLoad(src + i));
  for (; i < n; ++i) dst[i] = SLoad(src + i);
}

}  // namespace sy::cpu
