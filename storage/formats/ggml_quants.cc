#include "storage/formats/ggml_quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "runtime/core/dtype.h"
#include "runtime/core/quant_blocks.h"

namespace sy::storage {
namespace {

float HalfAt(const uint8_t* p) {
  F16 h;
  std::memcpy(&h.bits, p, 2);
  return F16ToF32(h);
}

// Q6_K { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; } (ggml-common.h): 256 values in two halves
// of 128; in each, value l + 32 j (j = 0..3) takes 4 low bits from ql (byte l or l + 32, low or
// high nibble) and 2 high bits from qh[l] (bits 2j, 2j + 1), minus 32, times d * scales[l / 16 +
// 2 j]. ggml's dequantize_row_q6_K, multiplying (d * scale) * q as it and gguf-py do.
void DequantQ6_K(const uint8_t* block, float* y) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(block + 192);
  const float d = HalfAt(block + 208);
  for (int half = 0; half < 2; ++half) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q[4] = {
          ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32,
          ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32,
          ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32,
          ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32,
      };
      for (int j = 0; j < 4; ++j) {
        y[l + 32 * j] = d * static_cast<float>(sc[is + 2 * j]) * static_cast<float>(q[j]);
      }
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

// Q5_K { f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; } (ggml-common.h): Q4_K's
// layout with a fifth bit per value. In each 64 values j, the first 32 take the low nibbles of
// qs[32 j ..] and bit 2j of qh[l], the next 32 the high nibbles and bit 2j + 1; x = d * sc * q -
// dmin * m with sc, m as Q4_K's (Q4KScaleMin). ggml's dequantize_row_q5_K, in gguf-py's order:
// (d * sc) * q, then minus dmin * m.
void DequantQ5_K(const uint8_t* block, float* y) {
  const float d = HalfAt(block);
  const float dmin = HalfAt(block + 2);
  const uint8_t* scales = block + 4;
  const uint8_t* qh = block + 16;
  const uint8_t* ql = block + 48;
  for (int j = 0; j < 4; ++j) {
    uint8_t sc = 0;
    uint8_t m = 0;
    Q4KScaleMin(2 * j, scales, &sc, &m);
    const float d1 = d * sc;
    const float m1 = dmin * m;
    Q4KScaleMin(2 * j + 1, scales, &sc, &m);
    const float d2 = d * sc;
    const float m2 = dmin * m;
    for (int l = 0; l < 32; ++l) {
      const int q = (ql[l] & 0xF) | (((qh[l] >> (2 * j)) & 1) << 4);
      *y++ = d1 * static_cast<float>(q) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      const int q = (ql[l] >> 4) | (((qh[l] >> (2 * j + 1)) & 1) << 4);
      *y++ = d2 * static_cast<float>(q) - m2;
    }
    ql += 32;
  }
}

}  // namespace

std::optional<DType> GgmlTypeToDType(GgmlType type) {
  if (type == GgmlType::kF32) return DType::kF32;
  if (type == GgmlType::kF16) return DType::kF16;
  if (type == GgmlType::kBF16) return DType::kBF16;
  if (type == GgmlType::kQ8_0) return DType::kQ8_0;
  if (type == GgmlType::kQ4_0) return DType::kQ4_0;
  if (type == GgmlType::kQ4_K) return DType::kQ4_K;
  return std::nullopt;
}

bool GgmlTypeConvertsToF32(GgmlType type) {
  return type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16 ||
         type == GgmlType::kF64 || type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0 ||
         type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ6_K;
}

Status DequantizeToF32(GgmlType type, std::span<const uint8_t> data, std::span<float> out) {
  const std::string name(GgmlTypeName(type));
  if (!GgmlTypeConvertsToF32(type)) {
    return InvalidArgumentError(
        "ggml type " + name +
        " has no f32 conversion here; supported: F32, F16, BF16, F64, "
        "Q8_0, Q4_0, Q4_K, Q5_K, Q6_K (re-quantize the model to one of them)");
  }
  const auto block = static_cast<size_t>(GgmlBlockSize(type));
  const auto size = static_cast<size_t>(GgmlTypeSize(type));
  const size_t n = out.size();
  if (n % block != 0 || data.size() != n / block * size) {
    return InvalidArgumentError(std::to_string(data.size()) + " bytes of " + name +
                                " do not hold " + std::to_string(n) + " values");
  }
  const uint8_t* src = data.data();
  float* dst = out.data();
  if (type == GgmlType::kF32) {
    if (n > 0) std::memcpy(dst, src, n * 4);
  } else if (type == GgmlType::kF16) {
    for (size_t i = 0; i < n; ++i) dst[i] = HalfAt(src + 2 * i);
  } else if (type == GgmlType::kBF16) {
    for (size_t i = 0; i < n; ++i) {
      BF16 h;
      std::memcpy(&h.bits, src + 2 * i, 2);
      dst[i] = BF16ToF32(h);
    }
  } else if (type == GgmlType::kF64) {
    for (size_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, src + 8 * i, 8);
      dst[i] = static_cast<float>(v);
    }
  } else if (type == GgmlType::kQ5_K) {
    for (size_t b = 0; b < n / block; ++b) DequantQ5_K(src + b * size, dst + b * block);
  } else if (type == GgmlType::kQ6_K) {
    for (size_t b = 0; b < n / block; ++b) DequantQ6_K(src + b * size, dst + b * block);
  } else {  // Q8_0, Q4_0 or Q4_K, the block types GgmlTypeConvertsToF32 accepts
    DequantizeBlocks(*GgmlTypeToDType(type), src, dst, static_cast<int64_t>(n));
  }
  return Status::Ok();
}

Status QuantizeFromF32(GgmlType type, std::span<const float> in, std::span<uint8_t> out) {
  if (type != GgmlType::kQ8_0 && type != GgmlType::kQ4_0) {
    return InvalidArgumentError("quantizing to " + std::string(GgmlTypeName(type)) +
                                " is not supported; supported: Q8_0, Q4_0");
  }
  const size_t size = static_cast<size_t>(GgmlTypeSize(type));
  if (in.size() % 32 != 0 || out.size() != in.size() / 32 * size) {
    return InvalidArgumentError(
        std::to_string(in.size()) + " values do not quantize into " + std::to_string(out.size()) +
        " bytes of " + std::string(GgmlTypeName(type)) + " (rows must be a multiple of 32 values)");
  }
  QuantizeBlocks(type == GgmlType::kQ8_0 ? DType::kQ8_0 : DType::kQ4_0, in.data(), out.data(),
                 static_cast<int64_t>(in.size()));
  return Status::Ok();
}

}  // namespace sy::storage
