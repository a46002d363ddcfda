// DType: the element types Switchyard stores, computes with and communicates, and the exact
// conversions between the floating-point ones.
//
// f64 is a host type for statistics and reductions (losses, norms, sums moved by the
// communicators); no backend computes with it, and ConvertBuffer does not convert it.
//
// q8_0, q4_0 and the k-quants q2_k, q3_k, q4_k, q5_k and q6_k are weight storage types in ggml's
// block layouts, byte for byte as a GGUF file stores them (runtime/core/quant_blocks.h): a block of
// 32 (the k-quants: 256) consecutive values of a row shares its scales. They have no per-element
// size: DTypeSize aborts on them, and byte counts come from DTypeBytes, which needs a whole number
// of blocks. Only a weight operand of the GEMM operators may be quantized
// (runtime/backend/backend.h), always with its rows along the last dimension (trans_b).
//
// Conversions to 16-bit floats round to nearest, ties to even, exactly as IEEE 754 does (and as
// PyTorch's .to(torch.bfloat16) / .to(torch.float16) do): overflow goes to infinity, f16
// subnormals are produced and read back, NaN stays NaN (quieted). The buffer conversions use
// AVX2/F16C when the build targets them and the scalar code otherwise; both give the same bits for
// every non-NaN input.
//
// Thread-safety: pure functions.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/core/status.h"

namespace sy {

// Values are stable (appended, never reordered): formats may store them.
enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kI32,
  kI64,
  kU8,
  kI8,
  kF64,
  kQ8_0,
  kQ4_0,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ2_K,
  kQ3_K
};

// Bytes per element of a plain dtype; aborts for a quantized one (use DTypeBytes).
size_t DTypeSize(DType dtype);
// "f32", "f16", "bf16", "i32", "i64", "u8", "i8", "f64", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k",
// "q2_k", "q3_k"
std::string_view DTypeName(DType dtype);
Result<DType> ParseDType(std::string_view name);
// f32, f16, bf16 and f64 (not the quantized types, whose values need their block to read).
bool IsFloatingPoint(DType dtype);
// q8_0, q4_0 and the k-quants.
bool IsQuantized(DType dtype);
// Values per block: 1 for a plain dtype, 32 for q8_0 and q4_0, 256 for the k-quants.
int64_t DTypeBlockSize(DType dtype);
// Bytes per block: DTypeSize for a plain dtype; 34 (q8_0), 18 (q4_0), 84 (q2_k), 110 (q3_k),
// 144 (q4_k), 176 (q5_k), 210 (q6_k).
size_t DTypeBlockBytes(DType dtype);
// Bytes of `numel` values; aborts unless numel is a whole number of blocks.
size_t DTypeBytes(DType dtype, int64_t numel);

// 16-bit float storage types: plain bit containers, so buffers of them are trivially copyable.
struct BF16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<F16> {
  static constexpr DType value = DType::kF16;
};
template <>
struct DTypeOf<BF16> {
  static constexpr DType value = DType::kBF16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::kI8;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kF64;
};

// ---- scalar conversions (inline: they sit inside kernels' inner loops) ----

inline float BF16ToF32(BF16 h) { return std::bit_cast<float>(static_cast<uint32_t>(h.bits) << 16); }

inline BF16 F32ToBF16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return BF16{static_cast<uint16_t>((x >> 16) | 0x0040u)};
  uint32_t lsb = (x >> 16) & 1u;
  return BF16{static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16)};
}

inline float F16ToF32(F16 h) {
  uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  uint32_t exponent = (h.bits >> 10) & 0x1fu;
  uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in f32.
    float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<uint32_t>(magnitude) | sign);
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline F16 F32ToF16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t magnitude = x & 0x7fffffffu;
  uint16_t out;
  if (magnitude >= (143u << 23)) {  // >= 2^16: infinity, or NaN kept as a quiet NaN
    out = magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (magnitude < (113u << 23)) {  // below 2^-14: f16 subnormal or zero
    // Adding 0.5 aligns the 10 result bits at the bottom of the f32 mantissa; the FPU's own
    // round-to-nearest-even does the rounding.
    float aligned = std::bit_cast<float>(magnitude) + 0.5f;
    out = static_cast<uint16_t>(std::bit_cast<uint32_t>(aligned) - std::bit_cast<uint32_t>(0.5f));
  } else {
    uint32_t odd = (magnitude >> 13) & 1u;
    // Rebias the exponent (127 -> 15) and add the rounding bias; a carry out of the mantissa
    // correctly bumps the exponent, up to infinity.
    magnitude += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + odd;
    out = static_cast<uint16_t>(magnitude >> 13);
  }
  return F16{static_cast<uint16_t>(out | sign)};
}

// ---- buffer conversions (vectorised) ----

void ConvertF32ToBF16(const float* src, BF16* dst, size_t n);
void ConvertBF16ToF32(const BF16* src, float* dst, size_t n);
void ConvertF32ToF16(const float* src, F16* dst, size_t n);
void ConvertF16ToF32(const F16* src, float* dst, size_t n);

// Converts n elements between any two of f32, f16 and bf16 (same dtype: a copy).
// Returns InvalidArgument for any other dtype.
Status ConvertBuffer(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n);

// Reads element i of a floating-point buffer as f32 (slow path for tests and tools).
float LoadAsF32(const void* data, DType dtype, size_t i);

}  // namespace sy
