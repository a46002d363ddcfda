#include "storage/formats/ggml_quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "runtime/core/dtype.h"

namespace sy::storage {
namespace {

float HalfAt(const uint8_t* p) {
  F16 h;
  std::memcpy(&h.bits, p, 2);
  return F16ToF32(h);
}

void DequantQ8_0(const uint8_t* block, float* y) {
  const float d = HalfAt(block);
  for (int i = 0; i < 32; ++i) y[i] = d * static_cast<float>(static_cast<int8_t>(block[2 + i]));
}

void DequantQ4_0(const uint8_t* block, float* y) {
  const float d = HalfAt(block);
  const uint8_t* qs = block + 2;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>((qs[i] & 0x0F) - 8);
    y[i + 16] = d * static_cast<float>((qs[i] >> 4) - 8);
  }
}

// ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j of a Q4_K block.
void ScaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void DequantQ4_K(const uint8_t* block, float* y) {
  const float d = HalfAt(block);
  const float dmin = HalfAt(block + 2);
  const uint8_t* scales = block + 4;
  const uint8_t* q = block + 16;
  int is = 0;
  for (int j = 0; j < 256; j += 64) {
    uint8_t sc = 0;
    uint8_t m = 0;
    ScaleMinK4(is, scales, &sc, &m);
    const float d1 = d * sc;
    const float m1 = dmin * m;
    ScaleMinK4(is + 1, scales, &sc, &m);
    const float d2 = d * sc;
    const float m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
    is += 2;
  }
}

}  // namespace

bool GgmlTypeConvertsToF32(GgmlType type) {
  return type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16 ||
         type == GgmlType::kF64 || type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0 ||
         type == GgmlType::kQ4_K;
}

Status DequantizeToF32(GgmlType type, std::span<const uint8_t> data, std::span<float> out) {
  const std::string name(GgmlTypeName(type));
  if (!GgmlTypeConvertsToF32(type)) {
    return InvalidArgumentError("ggml type " + name +
                                " has no f32 conversion here; supported: F32, F16, BF16, F64, "
                                "Q8_0, Q4_0, Q4_K (re-quantize the model to one of them)");
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
  const size_t blocks = n / block;
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
  } else if (type == GgmlType::kQ8_0) {
    for (size_t b = 0; b < blocks; ++b) DequantQ8_0(src + b * size, dst + b * block);
  } else if (type == GgmlType::kQ4_0) {
    for (size_t b = 0; b < blocks; ++b) DequantQ4_0(src + b * size, dst + b * block);
  } else {  // kQ4_K, the last one GgmlTypeConvertsToF32 accepts
    for (size_t b = 0; b < blocks; ++b) DequantQ4_K(src + b * size, dst + b * block);
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
  for (size_t b = 0; b < in.size() / 32; ++b) {
    const float* x = in.data() + b * 32;
    uint8_t* y = out.data() + b * size;
    if (type == GgmlType::kQ8_0) {
      float amax = 0.0f;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      const F16 dh = F32ToF16(d);
      std::memcpy(y, &dh.bits, 2);
      for (int i = 0; i < 32; ++i) {
        y[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[i] * id)));
      }
    } else {
      float max = 0.0f;
      float amax = 0.0f;
      for (int i = 0; i < 32; ++i) {
        if (std::fabs(x[i]) > amax) {
          amax = std::fabs(x[i]);
          max = x[i];
        }
      }
      const float d = max / -8.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      const F16 dh = F32ToF16(d);
      std::memcpy(y, &dh.bits, 2);
      // gguf.quants computes x * id + 8.5 in f64 (ggml's f32 reference differs only where FMA
      // contraction does).
      auto q = [&](float v) {
        const double t = std::trunc(static_cast<double>(v) * static_cast<double>(id) + 8.5);
        return static_cast<uint8_t>(std::clamp(t, 0.0, 15.0));
      };
      for (int i = 0; i < 16; ++i) {
        y[2 + i] = static_cast<uint8_t>(q(x[i]) | (q(x[i + 16]) << 4));
      }
    }
  }
  return Status::Ok();
}

}  // namespace sy::storage
