#include "runtime/core/dtype.h"

#include <cstring>
#include <string>

#include "runtime/core/check.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace sy {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kU8:
      return 1;
    case DType::kI8:
      return 1;
    case DType::kF64:
      return 8;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ2_K:
    case DType::kQ3_K:
      SY_CHECK(false) << "DTypeSize of " << DTypeName(dtype)
                      << ", a block type with no per-element size (use DTypeBytes)";
      return 0;
  }
  SY_CHECK(false) << "bad dtype " << static_cast<int>(dtype);
  return 0;
}

bool IsQuantized(DType dtype) {
  return dtype == DType::kQ8_0 || dtype == DType::kQ4_0 || dtype == DType::kQ4_K ||
         dtype == DType::kQ5_K || dtype == DType::kQ6_K || dtype == DType::kQ2_K ||
         dtype == DType::kQ3_K;
}

int64_t DTypeBlockSize(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
    case DType::kQ4_0:
      return 32;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ2_K:
    case DType::kQ3_K:
      return 256;
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kI32:
    case DType::kI64:
    case DType::kU8:
    case DType::kI8:
    case DType::kF64:
      return 1;
  }
  return 1;
}

size_t DTypeBlockBytes(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return 34;
    case DType::kQ4_0:
      return 18;
    case DType::kQ4_K:
      return 144;
    case DType::kQ5_K:
      return 176;
    case DType::kQ6_K:
      return 210;
    case DType::kQ2_K:
      return 84;
    case DType::kQ3_K:
      return 110;
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kI32:
    case DType::kI64:
    case DType::kU8:
    case DType::kI8:
    case DType::kF64:
      return DTypeSize(dtype);
  }
  return 0;
}

size_t DTypeBytes(DType dtype, int64_t numel) {
  const int64_t block = DTypeBlockSize(dtype);
  SY_CHECK(numel >= 0 && numel % block == 0) << numel << " values of " << DTypeName(dtype)
                                             << " are not a whole number of blocks of " << block;
  return static_cast<size_t>(numel / block) * DTypeBlockBytes(dtype);
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU8:
      return "u8";
    case DType::kI8:
      return "i8";
    case DType::kF64:
      return "f64";
    case DType::kQ8_0:
      return "q8_0";
    case DType::kQ4_0:
      return "q4_0";
    case DType::kQ4_K:
      return "q4_k";
    case DType::kQ5_K:
      return "q5_k";
    case DType::kQ6_K:
      return "q6_k";
    case DType::kQ2_K:
      return "q2_k";
    case DType::kQ3_K:
      return "q3_k";
  }
  return "?";
}

Result<DType> ParseDType(std::string_view name) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kU8,
                  DType::kI8, DType::kF64, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K,
                  DType::kQ6_K, DType::kQ2_K, DType::kQ3_K}) {
    if (DTypeName(d) == name) return d;
  }
  if (name == "float32") return DType::kF32;
  if (name == "float16") return DType::kF16;
  if (name == "bfloat16") return DType::kBF16;
  if (name == "float64") return DType::kF64;
  return InvalidArgumentError("unknown dtype '" + std::string(name) +
                              "': expected one of f32, f16, bf16, i32, i64, u8, i8, f64, q8_0, "
                              "q4_0, q2_k, q3_k, q4_k, q5_k, q6_k");
}

bool IsFloatingPoint(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 ||
         dtype == DType::kF64;
}

void ConvertF32ToBF16(const float* src, BF16* dst, size_t n) {
  size_t i = 0;
#if defined(__AVX2__)
  const __m256i kRound = _mm256_set1_epi32(0x7fff);
  const __m256i kOne = _mm256_set1_epi32(1);
  const __m256i kQuiet = _mm256_set1_epi32(0x0040);
  for (; i + 16 <= n; i += 16) {
    __m256i packed[2];
    for (int half = 0; half < 2; ++half) {
      __m256 f = _mm256_loadu_ps(src + i + 8 * half);
      __m256i x = _mm256_castps_si256(f);
      __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), kOne);
      __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, kRound), lsb), 16);
      __m256i nan_bits = _mm256_or_si256(_mm256_srli_epi32(x, 16), kQuiet);
      __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
      packed[half] = _mm256_blendv_epi8(rounded, nan_bits, is_nan);
    }
    // packus works per 128-bit lane; the permute restores element order.
    __m256i both = _mm256_permute4x64_epi64(_mm256_packus_epi32(packed[0], packed[1]), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), both);
  }
#endif
  for (; i < n; ++i) dst[i] = F32ToBF16(src[i]);
}

void ConvertBF16ToF32(const BF16* src, float* dst, size_t n) {
  size_t i = 0;
#if defined(__AVX2__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m256i x = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(x));
  }
#endif
  for (; i < n; ++i) dst[i] = BF16ToF32(src[i]);
}

void ConvertF32ToF16(const float* src, F16* dst, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
#endif
  for (; i < n; ++i) dst[i] = F32ToF16(src[i]);
}

void ConvertF16ToF32(const F16* src, float* dst, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = F16ToF32(src[i]);
}

Status ConvertBuffer(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n) {
  const auto convertible = [](DType d) {
    return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16;
  };
  if (!convertible(src_dtype) || !convertible(dst_dtype)) {
    return InvalidArgumentError("ConvertBuffer: " + std::string(DTypeName(src_dtype)) + " -> " +
                                std::string(DTypeName(dst_dtype)) +
                                " is not a conversion between f32, f16 and bf16");
  }
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, n * DTypeSize(src_dtype));
    return Status::Ok();
  }
  auto* f32_dst = static_cast<float*>(dst);
  const auto* f32_src = static_cast<const float*>(src);
  if (src_dtype == DType::kF32 && dst_dtype == DType::kBF16) {
    ConvertF32ToBF16(f32_src, static_cast<BF16*>(dst), n);
  } else if (src_dtype == DType::kF32 && dst_dtype == DType::kF16) {
    ConvertF32ToF16(f32_src, static_cast<F16*>(dst), n);
  } else if (src_dtype == DType::kBF16 && dst_dtype == DType::kF32) {
    ConvertBF16ToF32(static_cast<const BF16*>(src), f32_dst, n);
  } else if (src_dtype == DType::kF16 && dst_dtype == DType::kF32) {
    ConvertF16ToF32(static_cast<const F16*>(src), f32_dst, n);
  } else {
    // bf16 <-> f16 through f32 (exact widening, then one rounding).
    for (size_t i = 0; i < n; ++i) {
      float v = LoadAsF32(src, src_dtype, i);
      if (dst_dtype == DType::kBF16) {
        static_cast<BF16*>(dst)[i] = F32ToBF16(v);
      } else {
        static_cast<F16*>(dst)[i] = F32ToF16(v);
      }
    }
  }
  return Status::Ok();
}

float LoadAsF32(const void* data, DType dtype, size_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[i];
    case DType::kF16:
      return F16ToF32(static_cast<const F16*>(data)[i]);
    case DType::kBF16:
      return BF16ToF32(static_cast<const BF16*>(data)[i]);
    case DType::kI32:
      return static_cast<float>(static_cast<const int32_t*>(data)[i]);
    case DType::kI64:
      return static_cast<float>(static_cast<const int64_t*>(data)[i]);
    case DType::kU8:
      return static_cast<float>(static_cast<const uint8_t*>(data)[i]);
    case DType::kI8:
      return static_cast<float>(static_cast<const int8_t*>(data)[i]);
    case DType::kF64:
      return static_cast<float>(static_cast<const double*>(data)[i]);
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ2_K:
    case DType::kQ3_K:
      SY_CHECK(false) << "LoadAsF32 of a " << DTypeName(dtype)
                      << " element (dequantize its block: runtime/core/quant_blocks.h)";
  }
  return 0.0f;
}

}  // namespace sy
