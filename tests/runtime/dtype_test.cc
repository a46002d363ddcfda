// DType conversions: exhaustive 16-bit round trips, f32 -> bf16/f16 rounding against an
// independent oracle (a search of the sorted list of every finite 16-bit value, ties to even), and
// the vectorised buffer conversions against the scalar ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/tensor.h"

namespace sy {
namespace {

// ---- an oracle written from the format definitions ----

struct Format {
  int mantissa_bits;  // stored fraction bits
  int exponent_bits;
  uint16_t inf_bits;  // +infinity
  const char* name;
};
constexpr Format kBF16Format{7, 8, 0x7f80, "bf16"};
constexpr Format kF16Format{10, 5, 0x7c00, "f16"};

// The value of a non-negative, finite bit pattern, computed from its fields.
double Decode(const Format& f, uint16_t bits) {
  const int bias = (1 << (f.exponent_bits - 1)) - 1;
  const int e = (bits >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const int m = bits & ((1 << f.mantissa_bits) - 1);
  if (e == 0) return std::ldexp(static_cast<double>(m), 1 - bias - f.mantissa_bits);
  return std::ldexp(static_cast<double>((1 << f.mantissa_bits) + m), e - bias - f.mantissa_bits);
}

class Oracle {
 public:
  explicit Oracle(const Format& f) : f_(f) {
    // Every non-negative finite pattern, ascending in value, then +inf standing at max + ulp: the
    // value an unbounded exponent would give, so overflow rounds exactly as IEEE 754 says.
    for (uint16_t bits = 0; bits < f.inf_bits; ++bits) {
      bits_.push_back(bits);
      values_.push_back(Decode(f, bits));
    }
    const double max = values_.back();
    const double ulp = max - values_[values_.size() - 2];
    bits_.push_back(f.inf_bits);
    values_.push_back(max + ulp);
    EXPECT_TRUE(std::is_sorted(values_.begin(), values_.end()));
  }

  // Nearest representable value to x (finite or infinite, not NaN), ties to the even pattern.
  uint16_t Round(float x) const {
    const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double a = std::fabs(static_cast<double>(x));
    if (a >= values_.back()) return sign | f_.inf_bits;
    auto it = std::lower_bound(values_.begin(), values_.end(), a);
    const size_t hi = static_cast<size_t>(it - values_.begin());
    if (values_[hi] == a) return sign | bits_[hi];
    const size_t lo = hi - 1;
    const double dlo = a - values_[lo], dhi = values_[hi] - a;
    size_t pick = dlo < dhi ? lo : hi;
    if (dlo == dhi) pick = (bits_[lo] & 1) == 0 ? lo : hi;
    return sign | bits_[pick];
  }

 private:
  Format f_;
  std::vector<uint16_t> bits_;
  std::vector<double> values_;
};

std::vector<float> EdgeCases() {
  std::vector<float> v = {
      0.0f,
      -0.0f,
      1.0f,
      -1.0f,
      65504.0f,
      -65504.0f,
      65519.99f,
      65520.0f,
      -65520.0f,
      65536.0f,
      1e10f,
      std::numeric_limits<float>::max(),
      -std::numeric_limits<float>::max(),
      std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::min(),
      std::numeric_limits<float>::denorm_min(),
      -std::numeric_limits<float>::denorm_min(),
      std::ldexp(1.0f, -24),
      std::ldexp(1.0f, -25),
      std::ldexp(1.5f, -25),
      std::ldexp(1.0f, -26),
      std::ldexp(3.0f, -25),
      std::ldexp(1.0f, -14),
      std::ldexp(1023.0f, -24),
      std::ldexp(1023.5f, -24),
      std::ldexp(1.0f, -15),
      -std::ldexp(5.0f, -26),
      // bf16: the largest finite value and the ties around it.
      std::bit_cast<float>(0x7f7f0000u),
      std::bit_cast<float>(0x7f7f8000u),
      std::bit_cast<float>(0x7f7fffffu),
      std::bit_cast<float>(0x00008000u),
      std::bit_cast<float>(0x00018000u),
      std::bit_cast<float>(0x3f808000u),
      std::bit_cast<float>(0x3f818000u),
      std::bit_cast<float>(0x3f808001u),
      // f16 ties: 1 + 2^-11 (down to 1), 1 + 3 * 2^-11 (up), 2049, 2051.
      1.0f + std::ldexp(1.0f, -11),
      1.0f + 3 * std::ldexp(1.0f, -11),
      2049.0f,
      2051.0f,
      -2049.0f,
      4097.0f,
      0.1f,
      0.2f,
      1.0f / 3.0f,
      3.14159265f,
  };
  return v;
}

std::vector<float> RandomFloats(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<float> v;
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_real_distribution<double> exponent(-30.0, 17.0);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  while (v.size() < n) {
    // Alternate: arbitrary f32 bit patterns (all binades) and values in the f16 range.
    float x = std::bit_cast<float>(bits(gen));
    if (std::isnan(x)) continue;
    v.push_back(x);
    v.push_back(static_cast<float>(unit(gen) * std::exp2(exponent(gen))));
  }
  return v;
}

TEST(DType, BF16RoundTripsEveryPattern) {
  std::vector<BF16> all(65536);
  for (uint32_t b = 0; b < 65536; ++b) {
    const BF16 h{static_cast<uint16_t>(b)};
    all[b] = h;
    const float f = BF16ToF32(h);
    const BF16 back = F32ToBF16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(BF16ToF32(back))) << std::hex << b;
    } else {
      EXPECT_EQ(back.bits, h.bits) << std::hex << b;
      if (b < 0x7f80) {
        EXPECT_EQ(static_cast<double>(f), Decode(kBF16Format, h.bits)) << b;
      }
    }
  }
  std::vector<float> wide(all.size());
  ConvertBF16ToF32(all.data(), wide.data(), all.size());
  std::vector<BF16> narrow(all.size());
  ConvertF32ToBF16(wide.data(), narrow.data(), wide.size());
  for (size_t i = 0; i < all.size(); ++i) {
    // The vector path may quiet a signalling NaN (F16C does); dtype.h promises equal bits for
    // every non-NaN input only.
    if (std::isnan(BF16ToF32(all[i]))) {
      EXPECT_TRUE(std::isnan(wide[i]));
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(wide[i]), std::bit_cast<uint32_t>(BF16ToF32(all[i])));
    }
    if (std::isnan(wide[i])) {
      EXPECT_TRUE(std::isnan(BF16ToF32(narrow[i])));
    } else {
      EXPECT_EQ(narrow[i].bits, all[i].bits);
    }
  }
}

TEST(DType, F16RoundTripsEveryPattern) {
  std::vector<F16> all(65536);
  for (uint32_t b = 0; b < 65536; ++b) {
    const F16 h{static_cast<uint16_t>(b)};
    all[b] = h;
    const float f = F16ToF32(h);
    const F16 back = F32ToF16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToF32(back))) << std::hex << b;
    } else {
      EXPECT_EQ(back.bits, h.bits) << std::hex << b;
      if (b < 0x7c00) {
        EXPECT_EQ(static_cast<double>(f), Decode(kF16Format, h.bits)) << b;
      }
    }
  }
  std::vector<float> wide(all.size());
  ConvertF16ToF32(all.data(), wide.data(), all.size());
  std::vector<F16> narrow(all.size());
  ConvertF32ToF16(wide.data(), narrow.data(), wide.size());
  for (size_t i = 0; i < all.size(); ++i) {
    // The vector path may quiet a signalling NaN (F16C does); dtype.h promises equal bits for
    // every non-NaN input only.
    if (std::isnan(F16ToF32(all[i]))) {
      EXPECT_TRUE(std::isnan(wide[i]));
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(wide[i]), std::bit_cast<uint32_t>(F16ToF32(all[i])));
    }
    if (std::isnan(wide[i])) {
      EXPECT_TRUE(std::isnan(F16ToF32(narrow[i])));
    } else {
      EXPECT_EQ(narrow[i].bits, all[i].bits);
    }
  }
}

TEST(DType, F32ToBF16MatchesOracle) {
  const Oracle oracle(kBF16Format);
  std::vector<float> inputs = EdgeCases();
  std::vector<float> random = RandomFloats(200000, 1);
  inputs.insert(inputs.end(), random.begin(), random.end());
  int failures = 0;
  for (float x : inputs) {
    const uint16_t expected = oracle.Round(x);
    const uint16_t got = F32ToBF16(x).bits;
    if (got != expected && ++failures <= 10) {
      ADD_FAILURE() << "bf16(" << x << " = 0x" << std::hex << std::bit_cast<uint32_t>(x)
                    << "): got 0x" << got << ", oracle 0x" << expected;
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(DType, F32ToF16MatchesOracle) {
  const Oracle oracle(kF16Format);
  std::vector<float> inputs = EdgeCases();
  std::vector<float> random = RandomFloats(200000, 2);
  inputs.insert(inputs.end(), random.begin(), random.end());
  // Every f16 subnormal and its midpoints with the next one.
  for (int m = 0; m < 1024; ++m) {
    inputs.push_back(std::ldexp(static_cast<float>(m), -24));
    inputs.push_back(std::ldexp(static_cast<float>(2 * m + 1), -25));
  }
  int failures = 0;
  for (float x : inputs) {
    const uint16_t expected = oracle.Round(x);
    const uint16_t got = F32ToF16(x).bits;
    if (got != expected && ++failures <= 10) {
      ADD_FAILURE() << "f16(" << x << " = 0x" << std::hex << std::bit_cast<uint32_t>(x)
                    << "): got 0x" << got << ", oracle 0x" << expected;
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(DType, SpotValues) {
  EXPECT_EQ(F32ToF16(65504.0f).bits, 0x7bff);
  EXPECT_EQ(F32ToF16(65519.99f).bits, 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f).bits, 0x7c00);  // the tie rounds to even: infinity
  EXPECT_EQ(F32ToF16(-0.0f).bits, 0x8000);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)).bits, 0x0000);         // tie between 0 and 2^-24: even
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -25)).bits, 0x0002);         // tie between 1 and 2 ulps: even
  EXPECT_EQ(F32ToBF16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);  // tie: down to even
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::max()).bits, 0x7f80);
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(std::numeric_limits<float>::quiet_NaN()))));
  // A signalling-looking NaN whose payload sits in the low bits must not become infinity.
  const float low_payload_nan = std::bit_cast<float>(0x7f800001u);
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(low_payload_nan))));
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(low_payload_nan))));
}

TEST(DType, BufferConversionsMatchScalar) {
  std::vector<float> src = RandomFloats(1100, 3);
  std::vector<float> edges = EdgeCases();
  src.insert(src.begin(), edges.begin(), edges.end());
  src.push_back(std::numeric_limits<float>::quiet_NaN());
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{15}, size_t{16}, size_t{17},
                   size_t{31}, size_t{33}, size_t{1003}, src.size()}) {
    std::vector<BF16> b(n);
    std::vector<F16> h(n);
    ConvertF32ToBF16(src.data(), b.data(), n);
    ConvertF32ToF16(src.data(), h.data(), n);
    std::vector<float> from_b(n), from_h(n);
    ConvertBF16ToF32(b.data(), from_b.data(), n);
    ConvertF16ToF32(h.data(), from_h.data(), n);
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(src[i])) {
        EXPECT_TRUE(std::isnan(BF16ToF32(b[i])));
        EXPECT_TRUE(std::isnan(F16ToF32(h[i])));
        continue;
      }
      ASSERT_EQ(b[i].bits, F32ToBF16(src[i]).bits) << "n=" << n << " i=" << i << " x=" << src[i];
      ASSERT_EQ(h[i].bits, F32ToF16(src[i]).bits) << "n=" << n << " i=" << i << " x=" << src[i];
      ASSERT_EQ(std::bit_cast<uint32_t>(from_b[i]), std::bit_cast<uint32_t>(BF16ToF32(b[i])));
      if (!std::isnan(F16ToF32(h[i]))) {
        ASSERT_EQ(std::bit_cast<uint32_t>(from_h[i]), std::bit_cast<uint32_t>(F16ToF32(h[i])));
      }
    }
  }
}

TEST(DType, ConvertBufferRejectsIntegers) {
  int32_t i = 3;
  float f = 0;
  EXPECT_EQ(ConvertBuffer(&i, DType::kI32, &f, DType::kF32, 1).code(),
            StatusCode::kInvalidArgument);
  BF16 b = F32ToBF16(1.5f);
  F16 h{};
  ASSERT_TRUE(ConvertBuffer(&b, DType::kBF16, &h, DType::kF16, 1).ok());
  EXPECT_EQ(F16ToF32(h), 1.5f);
  double d = 2.0;
  EXPECT_EQ(ConvertBuffer(&d, DType::kF64, &f, DType::kF32, 1).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadAsF32(&d, DType::kF64, 0), 2.0f);
}

TEST(DType, NamesAndSizes) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kU8,
                  DType::kI8, DType::kF64}) {
    Result<DType> parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kI64), 8u);
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
  EXPECT_EQ(DTypeName(DType::kF64), "f64");
  EXPECT_EQ(*ParseDType("float64"), DType::kF64);
  EXPECT_EQ(DTypeOf<double>::value, DType::kF64);
  EXPECT_EQ(DTypeOf<int32_t>::value, DType::kI32);
  EXPECT_TRUE(IsFloatingPoint(DType::kF64));
  EXPECT_FALSE(IsFloatingPoint(DType::kI64));
  // The enum's values are stable: appended, never reordered.
  EXPECT_EQ(static_cast<int>(DType::kI8), 6);
  EXPECT_EQ(static_cast<int>(DType::kF64), 7);
  EXPECT_EQ(*ParseDType("bfloat16"), DType::kBF16);
  EXPECT_FALSE(ParseDType("f8").ok());
}

// The quantized weight types: ggml's block sizes (ggml-common.h), bytes only by whole blocks.
TEST(DType, QuantizedBlocks) {
  EXPECT_EQ(static_cast<int>(DType::kQ8_0), 8);
  EXPECT_EQ(static_cast<int>(DType::kQ4_0), 9);
  EXPECT_EQ(static_cast<int>(DType::kQ4_K), 10);
  EXPECT_EQ(static_cast<int>(DType::kQ5_K), 11);
  EXPECT_EQ(static_cast<int>(DType::kQ6_K), 12);
  EXPECT_EQ(static_cast<int>(DType::kQ2_K), 13);
  EXPECT_EQ(static_cast<int>(DType::kQ3_K), 14);
  for (DType d : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                  DType::kQ2_K, DType::kQ3_K}) {
    EXPECT_EQ(*ParseDType(DTypeName(d)), d);
    EXPECT_TRUE(IsQuantized(d));
    EXPECT_FALSE(IsFloatingPoint(d));
  }
  EXPECT_FALSE(IsQuantized(DType::kBF16));
  EXPECT_EQ(DTypeBlockSize(DType::kQ8_0), 32);
  EXPECT_EQ(DTypeBlockSize(DType::kQ4_K), 256);
  EXPECT_EQ(DTypeBlockSize(DType::kF32), 1);
  EXPECT_EQ(DTypeBytes(DType::kQ8_0, 64), 68u);
  EXPECT_EQ(DTypeBytes(DType::kQ4_0, 96), 54u);
  EXPECT_EQ(DTypeBytes(DType::kQ4_K, 512), 288u);
  // ggml-common.h: 2 f16 + 12 scale bytes + 128 + 32 (q5_k); f16 + 16 scales + 192 (q6_k).
  EXPECT_EQ(DTypeBytes(DType::kQ5_K, 512), 352u);
  EXPECT_EQ(DTypeBytes(DType::kQ6_K, 512), 420u);
  // 16 scale bytes + 64 + 2 f16 (q2_k); 32 hmask + 64 + 12 scale bytes + f16 (q3_k).
  EXPECT_EQ(DTypeBytes(DType::kQ2_K, 512), 168u);
  EXPECT_EQ(DTypeBytes(DType::kQ3_K, 512), 220u);
  EXPECT_EQ(DTypeBlockSize(DType::kQ6_K), 256);
  EXPECT_EQ(DTypeBytes(DType::kBF16, 3), 6u);
  EXPECT_DEATH(DTypeBytes(DType::kQ8_0, 48), "whole number of blocks");
  EXPECT_DEATH(DTypeSize(DType::kQ4_0), "DTypeBytes");
}

// A quantized tensor's bytes, and a slice of whole rows, follow its blocks.
TEST(DType, QuantizedTensorRows) {
  Tensor t = Tensor::Host(DType::kQ4_0, Shape{3, 4, 64});
  EXPECT_EQ(t.nbytes(), 3u * 4 * 2 * 18);
  Tensor second = t.Select(1);
  EXPECT_EQ(static_cast<char*>(second.data()) - static_cast<char*>(t.data()), 4 * 2 * 18);
  EXPECT_EQ(second.nbytes(), 4u * 2 * 18);
  EXPECT_FALSE(Tensor::TryHost(DType::kQ8_0, Shape{3, 5}).ok());
}

}  // namespace
}  // namespace sy
