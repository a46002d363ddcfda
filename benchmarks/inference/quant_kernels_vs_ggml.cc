// Switchyard's q4_0 / q8_0 / q2_k ... q6_k GEMV kernels (runtime/cpu/cpu_quant.h) against
// ggml's, per 32 weights, on one thread (issue 18: "as fast per byte as ggml's"). Built and run by
// quant_kernels_vs_ggml.sh against the llama.cpp build of scripts/build-llamacpp.sh.
//
//   quant_kernels_vs_ggml N K [ROUNDS]
//
// One GEMV y[N] = W[N, K] x[K] per pass, the activation rounding included on both sides
// (Switchyard's QuantizeActivations, ggml's quantize_row_q8_0, or quantize_row_q8_K for the
// k-quants):
//   - Switchyard: QuantGemvRows over the GGUF blocks as stored.
//   - ggml vec_dot: ggml_vec_dot_q4_0_q8_0 / ggml_vec_dot_q8_0_q8_0 / ggml_vec_dot_qN_K_q8_K per
//     row.
//   - ggml repacked (q4_0 only): ggml_gemv_q4_0_8x8_q8_0 over the rows repacked 8 at a time into
//     block_q4_0x8, what llama.cpp runs for Q4_0 on an AVX2 CPU (ggml-cpu/repack.cpp picks it
//     when the row count is a multiple of 8); llama.cpp's q8_0 has no repacked path on x86. Its
//     q4_k one (block_q4_Kx8) is not reproduced here: compare whole decodes (vs_llamacpp.sh).
// The k-quants have no quantizer here (ggml's search their scales): their blocks are random bytes
// with d (and dmin) of 2^-8..2^-6, as the op-check harness makes them.
// Each figure is the best of ROUNDS (default 7) passes of at least 0.15 s of thread CPU time, so a
// shared machine's other jobs do not inflate it; the three alternate within each round. The
// outputs are checked against each other (relative to the largest |y|) before timing.
// N x K small (256 x 1024: 144 KiB in q4_0) keeps the weights in L2 and gives the kernels' own
// rate; N large (32768 x 1024) streams them from DRAM.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/quant_blocks.h"
#include "runtime/cpu/cpu_quant.h"

extern "C" {
void ggml_cpu_init(void);
void quantize_row_q8_0(const float* x, void* y, int64_t k);
void quantize_row_q8_K(const float* x, void* y, int64_t k);
void ggml_vec_dot_q4_K_q8_K(int n, float* s, size_t bs, const void* vx, size_t bx, const void* vy,
                            size_t by, int nrc);
void ggml_vec_dot_q2_K_q8_K(int n, float* s, size_t bs, const void* vx, size_t bx, const void* vy,
                            size_t by, int nrc);
void ggml_vec_dot_q3_K_q8_K(int n, float* s, size_t bs, const void* vx, size_t bx, const void* vy,
                            size_t by, int nrc);
void ggml_vec_dot_q5_K_q8_K(int n, float* s, size_t bs, const void* vx, size_t bx, const void* vy,
                            size_t by, int nrc);
void ggml_vec_dot_q6_K_q8_K(int n, float* s, size_t bs, const void* vx, size_t bx, const void* vy,
                            size_t by, int nrc);
void ggml_vec_dot_q4_0_q8_0(int n, float* s, size_t bs, const void* vx, size_t bx, const void* vy,
                            size_t by, int nrc);
void ggml_vec_dot_q8_0_q8_0(int n, float* s, size_t bs, const void* vx, size_t bx, const void* vy,
                            size_t by, int nrc);
void ggml_gemv_q4_0_8x8_q8_0(int n, float* s, size_t bs, const void* vx, const void* vy, int nr,
                             int nc);
}

namespace {

double ThreadSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Nanoseconds of thread CPU time per weight block of one pass of f, over at least 0.15 s.
template <typename F>
double NsPerBlock(int64_t blocks, const F& f) {
  const double t0 = ThreadSeconds();
  int passes = 0;
  do {
    f();
    ++passes;
  } while (ThreadSeconds() - t0 < 0.15);
  return (ThreadSeconds() - t0) / passes / static_cast<double>(blocks) * 1e9;
}

// ggml's block_q4_0x8 with an interleave of 8 bytes (repack.cpp, make_block_q4_0x8): the 8
// blocks' f16 scales, then their 16 bytes of nibbles in 8-byte pieces taken from block i % 8 at
// offset (i / 8) * 8, each byte xor 0x88 (the nibbles made signed for its lookup table). Rows
// come 8 at a time: the output's block (g, x) holds block x of rows 8g .. 8g + 7.
std::vector<uint8_t> RepackQ4_0x8(const std::vector<uint8_t>& q4, int64_t n, int64_t nb) {
  std::vector<uint8_t> out(q4.size());
  for (int64_t g = 0; g < n / 8; ++g) {
    for (int64_t x = 0; x < nb; ++x) {
      uint8_t* dst = out.data() + (g * nb + x) * 144;
      const uint8_t* src[8];
      for (int i = 0; i < 8; ++i) src[i] = q4.data() + ((g * 8 + i) * nb + x) * 18;
      for (int i = 0; i < 8; ++i) std::memcpy(dst + 2 * i, src[i], 2);
      for (int i = 0; i < 16; ++i) {
        for (int j = 0; j < 8; ++j) dst[16 + i * 8 + j] = src[i % 8][2 + (i / 8) * 8 + j] ^ 0x88;
      }
    }
  }
  return out;
}

// n * k / 256 blocks of k-quant t of random bytes, the f16 super-block scales (KQuantScaleOffsets)
// in [2^-8, 2^-6).
std::vector<uint8_t> RandomKQuant(std::mt19937& rng, sy::DType t, int64_t n, int64_t k) {
  std::vector<uint8_t> blocks(sy::DTypeBytes(t, n * k));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& v : blocks) v = static_cast<uint8_t>(byte(rng));
  const std::vector<size_t> offsets = sy::KQuantScaleOffsets(t);
  for (size_t b = 0; b < blocks.size(); b += sy::DTypeBlockBytes(t)) {
    for (size_t offset : offsets) {
      const sy::F16 scale = sy::F32ToF16(
          std::ldexp(1.0f + static_cast<float>(byte(rng)) / 256.0f, -8 + byte(rng) % 2));
      std::memcpy(&blocks[b + offset], &scale.bits, 2);
    }
  }
  return blocks;
}

double MaxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0.0, diff = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  return diff / scale;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s N K [ROUNDS]  (N a multiple of 8, K of 256)\n", argv[0]);
    return 2;
  }
  const int64_t n = std::atoll(argv[1]), k = std::atoll(argv[2]);
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 7;
  if (n <= 0 || k <= 0 || n % 8 != 0 || k % 256 != 0 || rounds <= 0) {
    std::fprintf(stderr, "N must be a positive multiple of 8, K of 256\n");
    return 2;
  }
  ggml_cpu_init();
  const int64_t nb = k / 32, blocks = n * nb;
  std::mt19937 rng(18);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(n * k)), x(static_cast<size_t>(k));
  for (float& v : w) v = dist(rng);
  for (float& v : x) v = dist(rng);

  std::vector<int8_t> aq(static_cast<size_t>(k));
  std::vector<float> ad(static_cast<size_t>(nb)), ad4(static_cast<size_t>(nb * 4));
  std::vector<int16_t> offsets(static_cast<size_t>(nb * 8));
  std::vector<float> asums(static_cast<size_t>(nb));
  std::vector<int16_t> asums16(static_cast<size_t>(nb * 2));
  std::vector<uint8_t> xq8(static_cast<size_t>(nb * 34));
  std::vector<uint8_t> xq8k(static_cast<size_t>(k / 256 * 292));  // block_q8_K: d, 256 qs, 16 bsums
  std::vector<float> ours(static_cast<size_t>(n)), vec(static_cast<size_t>(n)),
      repacked(static_cast<size_t>(n));

  std::printf(
      "| type | N x K | Switchyard ns/32 weights | ggml vec_dot ns/32 weights | ggml repacked "
      "ns/32 weights | ggml best / Switchyard | max rel. diff |\n"
      "| --- | --- | --- | --- | --- | --- | --- |\n");
  for (sy::DType t : {sy::DType::kQ4_0, sy::DType::kQ8_0, sy::DType::kQ2_K, sy::DType::kQ3_K,
                      sy::DType::kQ4_K, sy::DType::kQ5_K, sy::DType::kQ6_K}) {
    const bool q4 = t == sy::DType::kQ4_0, kquant = sy::DTypeBlockSize(t) == 256;
    const auto kquant_dot = t == sy::DType::kQ2_K   ? ggml_vec_dot_q2_K_q8_K
                            : t == sy::DType::kQ3_K ? ggml_vec_dot_q3_K_q8_K
                            : t == sy::DType::kQ4_K ? ggml_vec_dot_q4_K_q8_K
                            : t == sy::DType::kQ5_K ? ggml_vec_dot_q5_K_q8_K
                                                    : ggml_vec_dot_q6_K_q8_K;
    const auto row_bytes = static_cast<int64_t>(sy::DTypeBytes(t, k));
    std::vector<uint8_t> wq(static_cast<size_t>(n * row_bytes));
    if (kquant) {
      wq = RandomKQuant(rng, t, n, k);
    } else {
      sy::QuantizeBlocks(t, w.data(), wq.data(), n * k);
    }
    const std::vector<uint8_t> wx8 = q4 ? RepackQ4_0x8(wq, n, nb) : std::vector<uint8_t>{};

    auto run_ours = [&] {
      sy::cpu::QuantizeActivations(x.data(), 1, k, aq.data(), ad.data(), ad4.data(), offsets.data(),
                                   asums.data(), asums16.data());
      sy::cpu::QuantGemvRows(
          t, {aq.data(), ad.data(), ad4.data(), offsets.data(), asums.data(), asums16.data()}, 1, k,
          wq.data(), ours.data(), n, 1.0f, 0.0f, 0, n);
    };
    auto run_vec = [&] {
      if (kquant) {
        quantize_row_q8_K(x.data(), xq8k.data(), k);
        for (int64_t r = 0; r < n; ++r) {
          kquant_dot(static_cast<int>(k), &vec[r], 0, wq.data() + r * row_bytes, 0, xq8k.data(), 0,
                     1);
        }
        return;
      }
      quantize_row_q8_0(x.data(), xq8.data(), k);
      for (int64_t r = 0; r < n; ++r) {
        const uint8_t* row = wq.data() + r * row_bytes;
        if (q4) {
          ggml_vec_dot_q4_0_q8_0(static_cast<int>(k), &vec[r], 0, row, 0, xq8.data(), 0, 1);
        } else {
          ggml_vec_dot_q8_0_q8_0(static_cast<int>(k), &vec[r], 0, row, 0, xq8.data(), 0, 1);
        }
      }
    };
    auto run_repacked = [&] {
      quantize_row_q8_0(x.data(), xq8.data(), k);
      ggml_gemv_q4_0_8x8_q8_0(static_cast<int>(k), repacked.data(), static_cast<size_t>(n),
                              wx8.data(), xq8.data(), 1, static_cast<int>(n));
    };
    run_ours();
    run_vec();
    double diff = MaxRelativeDifference(ours, vec);
    if (q4) {
      run_repacked();
      diff = std::max(diff, MaxRelativeDifference(repacked, vec));
    }
    // The activations round to 8 bits on both sides; ggml keeps their scale in f16, Switchyard in
    // f32, so the products differ by about 2^-11 of the largest (the k-quants: ggml rounds them per
    // 256 values with one f32 scale, Switchyard per 32, so they differ by about 1%).
    const std::string name(sy::DTypeName(t));
    if (diff > (kquant ? 5e-2 : 1e-2)) {
      std::fprintf(stderr, "%s: the kernels disagree (max relative difference %g)\n", name.c_str(),
                   diff);
      return 1;
    }
    double best_ours = 1e30, best_vec = 1e30, best_rep = 1e30;
    for (int r = 0; r < rounds; ++r) {
      best_ours = std::min(best_ours, NsPerBlock(blocks, run_ours));
      best_vec = std::min(best_vec, NsPerBlock(blocks, run_vec));
      if (q4) best_rep = std::min(best_rep, NsPerBlock(blocks, run_repacked));
    }
    const double ggml_best = std::min(best_vec, best_rep);
    char rep[32] = "-";
    if (q4) std::snprintf(rep, sizeof(rep), "%.3f", best_rep);
    std::printf("| %s | %lld x %lld | %.3f | %.3f | %s | %.2f | %.1e |\n", name.c_str(),
                static_cast<long long>(n), static_cast<long long>(k), best_ours, best_vec, rep,
                ggml_best / best_ours, diff);
  }
  return 0;
}
