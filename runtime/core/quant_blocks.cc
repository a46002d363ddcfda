#include "runtime/core/quant_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/core/check.h"

namespace sy {
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

void DequantQ4_K(const uint8_t* block, float* y) {
  const float d = HalfAt(block);
  const float dmin = HalfAt(block + 2);
  const uint8_t* scales = block + 4;
  const uint8_t* q = block + 16;
  int is = 0;
  for (int j = 0; j < 256; j += 64) {
    uint8_t sc = 0;
    uint8_t m = 0;
    Q4KScaleMin(is, scales, &sc, &m);
    const float d1 = d * sc;
    const float m1 = dmin * m;
    Q4KScaleMin(is + 1, scales, &sc, &m);
    const float d2 = d * sc;
    const float m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
    is += 2;
  }
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

// Q2_K { u8 scales[16]; u8 qs[64]; f16 d; f16 dmin; }: 256 values in 16 sub-blocks of 16, each
// with a 4-bit scale (low nibble of scales[s]) and minimum (high nibble); in each half of 128,
// value l + 32 j (l < 32) takes bits 2j, 2j + 1 of qs[l]. ggml's dequantize_row_q2_K, in gguf-py's
// order: (d * sc) * q - dmin * m.
void DequantQ2_K(const uint8_t* block, float* y) {
  const float d = HalfAt(block + 80);
  const float dmin = HalfAt(block + 82);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* qs = block + 16 + 32 * half;
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t sc = block[8 * half + 2 * j + l / 16];
        const float dl = d * static_cast<float>(sc & 0xF);
        const float ml = dmin * static_cast<float>(sc >> 4);
        *y++ = dl * static_cast<float>((qs[l] >> (2 * j)) & 3) - ml;
      }
    }
  }
}

// Q3_K { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; }: 256 values in 16 sub-blocks of 16 with
// 6-bit scales minus 32 (Q3KScale); in each half h of 128, value l + 32 j takes bits 2j, 2j + 1 of
// qs[l] minus 4 when bit 4h + j of hmask[l] is clear. ggml's dequantize_row_q3_K, in gguf-py's
// order: (d * (sc - 32)) * q.
void DequantQ3_K(const uint8_t* block, float* y) {
  const float d = HalfAt(block + 108);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* qs = block + 32 + 32 * half;
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const float dl = d * static_cast<float>(Q3KScale(8 * half + 2 * j + l / 16, block + 96));
        int q = (qs[l] >> (2 * j)) & 3;
        if (((block[l] >> (4 * half + j)) & 1) == 0) q -= 4;
        *y++ = dl * static_cast<float>(q);
      }
    }
  }
}

void QuantQ8_0(const float* x, uint8_t* y) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const F16 dh = F32ToF16(d);
  std::memcpy(y, &dh.bits, 2);
  for (int i = 0; i < 32; ++i) {
    y[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[i] * id)));
  }
}

void QuantQ4_0(const float* x, uint8_t* y) {
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
  // gguf.quants computes x * id + 8.5 in f64, rounds that to f32 and then truncates
  // (np.trunc(..., dtype=np.float32)): a value a hair under an integer in f64 that rounds up to
  // it in f32 (x an exact multiple of d / 2, common in bf16 weights) truncates to that integer.
  // ggml's f32 reference differs only where FMA contraction does.
  auto q = [&](float v) {
    const float t = static_cast<float>(static_cast<double>(v) * static_cast<double>(id) + 8.5);
    return static_cast<uint8_t>(std::clamp(std::trunc(t), 0.0f, 15.0f));
  };
  for (int i = 0; i < 16; ++i) y[2 + i] = static_cast<uint8_t>(q(x[i]) | (q(x[i + 16]) << 4));
}

}  // namespace

void DequantizeBlocks(DType dtype, const void* src, float* dst, int64_t n) {
  SY_CHECK(IsQuantized(dtype)) << "DequantizeBlocks of " << DTypeName(dtype);
  const int64_t block = DTypeBlockSize(dtype);
  const auto bytes = static_cast<int64_t>(DTypeBlockBytes(dtype));
  SY_CHECK(n >= 0 && n % block == 0) << n << " values of " << DTypeName(dtype);
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / block; ++b) {
    switch (dtype) {
      case DType::kQ8_0:
        DequantQ8_0(s + b * bytes, dst + b * block);
        break;
      case DType::kQ4_0:
        DequantQ4_0(s + b * bytes, dst + b * block);
        break;
      case DType::kQ4_K:
        DequantQ4_K(s + b * bytes, dst + b * block);
        break;
      case DType::kQ5_K:
        DequantQ5_K(s + b * bytes, dst + b * block);
        break;
      case DType::kQ6_K:
        DequantQ6_K(s + b * bytes, dst + b * block);
        break;
      case DType::kQ2_K:
        DequantQ2_K(s + b * bytes, dst + b * block);
        break;
      case DType::kQ3_K:
        DequantQ3_K(s + b * bytes, dst + b * block);
        break;
      case DType::kF32:
      case DType::kF16:
      case DType::kBF16:
      case DType::kI32:
      case DType::kI64:
      case DType::kU8:
      case DType::kI8:
      case DType::kF64:
        return;
    }
  }
}

void QuantizeBlocks(DType dtype, const float* src, void* dst, int64_t n) {
  SY_CHECK(dtype == DType::kQ8_0 || dtype == DType::kQ4_0)
      << "QuantizeBlocks to " << DTypeName(dtype) << ": only q8_0 and q4_0 have a quantizer";
  SY_CHECK(n >= 0 && n % 32 == 0) << n << " values do not fill whole blocks of 32";
  auto* d = static_cast<uint8_t*>(dst);
  const size_t bytes = DTypeBlockBytes(dtype);
  for (int64_t b = 0; b < n / 32; ++b) {
    if (dtype == DType::kQ8_0) {
      QuantQ8_0(src + b * 32, d + b * bytes);
    } else {
      QuantQ4_0(src + b * 32, d + b * bytes);
    }
  }
}

void RoundActivationBlocks(const float* x, int64_t n, int8_t* q, float* d) {
  SY_CHECK(n >= 0 && n % 32 == 0) << n << " activations do not fill whole blocks of 32";
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    d[b] = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    // nearbyint rounds half to even in the default rounding mode, as vcvtps2dq does.
    for (int i = 0; i < 32; ++i) q[b * 32 + i] = static_cast<int8_t>(std::nearbyint(xb[i] * id));
  }
}

}  // namespace sy
