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

}  // namespace

std::optional<DType> GgmlTypeToDType(GgmlType type) {
  if (type == GgmlType::kF32) return DType::kF32;
  if (type == GgmlType::kF16) return DType::kF16;
  if (type == GgmlType::kBF16) return DType::kBF16;
  if (type == GgmlType::kQ8_0) return DType::kQ8_0;
  if (type == GgmlType::kQ4_0) return DType::kQ4_0;
  if (type == GgmlType::kQ4_K) return DType::kQ4_K;
  if (type == GgmlType::kQ5_K) return DType::kQ5_K;
  if (type == GgmlType::kQ6_K) return DType::kQ6_K;
  if (type == GgmlType::kQ2_K) return DType::kQ2_K;
  if (type == GgmlType::kQ3_K) return DType::kQ3_K;
  return std::nullopt;
}

bool GgmlTypeConvertsToF32(GgmlType type) {
  return type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16 ||
         type == GgmlType::kF64 || type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0 ||
         type == GgmlType::kQ2_K || type == GgmlType::kQ3_K || type == GgmlType::kQ4_K ||
         type == GgmlType::kQ5_K || type == GgmlType::kQ6_K;
}

Status DequantizeToF32(GgmlType type, std::span<const uint8_t> data, std::span<float> out) {
  const std::string name(GgmlTypeName(type));
  if (!GgmlTypeConvertsToF32(type)) {
    return InvalidArgumentError(
        "ggml type " + name +
        " has no f32 conversion here; supported: F32, F16, BF16, F64, "
        "Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (re-quantize the model to one of them)");
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
  } else {  // Q8_0, Q4_0 or a k-quant, the block types GgmlTypeConvertsToF32 accepts
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
