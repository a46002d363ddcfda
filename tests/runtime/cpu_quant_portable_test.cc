// The int8 kernels of runtime/cpu/cpu_quant.cc compiled into this binary with fewer instructions
// than the build's (tests/runtime/CMakeLists.txt), so that paths the main build never runs are
// tested too: sy_cpu_quant_portable_test without AVX2 (-mno-avx2 -mno-fma -mno-f16c: the scalar
// kernels), sy_cpu_quant_no_vnni_test without VNNI (-mno-avx512vnni -mno-avxvnni: the AVX2 kernels'
// vpmaddubsw / vpmaddwd dot where the build's target has vpdpbusd). Each checks the activation
// layout and the GEMV against the dequantize-then-f64 product of the blocks with the rounded
// activations (RoundActivationBlocks, DequantizeBlocks), odd block counts and several activation
// rows; the k-quants (which have no quantizer) on random blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/core/quant_blocks.h"
#include "runtime/cpu/cpu_quant.h"

#if defined(SY_EXPECT_NO_AVX2) && defined(__AVX2__)
#error "sy_cpu_quant_portable_test must be compiled without AVX2"
#endif
#if defined(SY_EXPECT_NO_VNNI) && (defined(__AVX512VNNI__) || defined(__AVXVNNI__))
#error "sy_cpu_quant_no_vnni_test must be compiled without VNNI"
#endif

namespace sy {
namespace {

// n * k / 256 blocks of k-quant `t` of random bytes, with the f16 super-block scales
// (KQuantScaleOffsets) random in [2^-8, 2^-6).
std::vector<uint8_t> RandomKQuant(std::mt19937& rng, DType t, int64_t n, int64_t k) {
  std::vector<uint8_t> blocks(DTypeBytes(t, n * k));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& v : blocks) v = static_cast<uint8_t>(byte(rng));
  const std::vector<size_t> offsets = KQuantScaleOffsets(t);
  for (size_t b = 0; b < blocks.size(); b += DTypeBlockBytes(t)) {
    for (size_t offset : offsets) {
      const F16 scale =
          F32ToF16(std::ldexp(1.0f + static_cast<float>(byte(rng)) / 256.0f, -8 + byte(rng) % 2));
      std::memcpy(&blocks[b + offset], &scale.bits, 2);
    }
  }
  return blocks;
}

TEST(CpuQuantPortable, MatchesTheDequantizedProduct) {
  for (int64_t k : {32, 96, 224, 256, 1024}) {
    for (int64_t rows : {1, 3, 5}) {
      for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                      DType::kQ5_K, DType::kQ6_K}) {
        if (k % DTypeBlockSize(t) != 0) continue;
        const int64_t n = 37, nb = k / 32;
        std::mt19937 rng(static_cast<uint32_t>(k * 7 + rows));
        std::normal_distribution<float> dist;
        std::vector<float> w(static_cast<size_t>(n * k)), a(static_cast<size_t>(rows * k));
        for (float& v : w) v = dist(rng);
        for (float& v : a) v = dist(rng);
        std::vector<uint8_t> wq(DTypeBytes(t, n * k));
        if (DTypeBlockSize(t) == 256) {
          wq = RandomKQuant(rng, t, n, k);
        } else {
          QuantizeBlocks(t, w.data(), wq.data(), n * k);
        }
        std::vector<float> wd(w.size());
        DequantizeBlocks(t, wq.data(), wd.data(), n * k);
        std::vector<int8_t> q_ref(a.size());
        std::vector<float> d_ref(a.size() / 32);
        RoundActivationBlocks(a.data(), rows * k, q_ref.data(), d_ref.data());

        std::vector<int8_t> q(a.size());
        std::vector<float> d(a.size() / 32), d4(a.size() / 8);
        std::vector<int16_t> offsets(a.size() / 4);
        std::vector<float> sums(a.size() / 32);
        std::vector<int16_t> sums16(a.size() / 16);
        cpu::QuantizeActivations(a.data(), rows, k, q.data(), d.data(), d4.data(), offsets.data(),
                                 sums.data(), sums16.data());
        std::vector<float> c(static_cast<size_t>(rows * n));
        cpu::QuantGemvRows(
            t, {q.data(), d.data(), d4.data(), offsets.data(), sums.data(), sums16.data()}, rows, k,
            wq.data(), c.data(), n, 1.0f, 0.0f, 0, n);
        for (int64_t m = 0; m < rows; ++m) {
          for (int64_t b = 0; b < nb; ++b) {
            for (int64_t i = 0; i < 32; ++i) {
              ASSERT_EQ(q[static_cast<size_t>(m * k + cpu::Int8ActivationIndex(nb, b, i))],
                        q_ref[static_cast<size_t>(m * k + b * 32 + i)]);
            }
          }
          for (int64_t r = 0; r < n; ++r) {
            double expect = 0.0, scale = 0.0;
            for (int64_t i = 0; i < k; ++i) {
              const auto j = static_cast<size_t>(m * k + i);
              const double x = static_cast<double>(d_ref[j / 32]) * q_ref[j];
              const double term = x * wd[static_cast<size_t>(r * k + i)];
              expect += term;
              scale += std::fabs(term);
            }
            EXPECT_NEAR(c[static_cast<size_t>(m * n + r)], expect, 1e-5 * scale + 1e-30)
                << DTypeName(t) << " k " << k << " row " << m << " output " << r;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace sy
