// An experiment, not part of the build: which software prefetch, if any, the bf16 decode GEMV
// should give its weights on this CPU (runtime/cpu/weight_prefetch.h). It streams one activation
// row against a 1 GiB [rows, 1024] bf16 matrix, cut into GEMVs of CHUNK_MIB each as a decode step's
// matrices are, every GEMV split over the threads, each thread's rows read 4 at a time either as 4
// streams from 4 equal parts of its range (GemvBf16Rows, runtime/cpu/cpu_gemm.cc) or as 4
// neighbouring rows. Each stream is prefetched once per 64-byte line, 512 bytes ahead
// (kBf16PrefetchBytes), with prefetchnta, prefetcht0, or not at all. The rounds alternate the
// variants; each prints the best of its rounds in GB/s of weights.
// Results in benchmarks/inference-results.md (session 23).
//
//   g++ -O2 -march=x86-64-v3 -fopenmp benchmarks/inference/prefetch_hint_variants.cc -o /tmp/hints
//   OMP_NUM_THREADS=2 OMP_WAIT_POLICY=active /tmp/hints CHUNK_MIB     (4: an expert's matrix)
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int kK = 1024;
constexpr int kPrefetchBytes = 512;

enum class Hint { kNonTemporal, kT0, kNone };

template <Hint H>
inline void Prefetch(const uint16_t* p) {
  const char* line = reinterpret_cast<const char*>(p) + kPrefetchBytes;
  if constexpr (H == Hint::kNonTemporal) _mm_prefetch(line, _MM_HINT_NTA);
  if constexpr (H == Hint::kT0) _mm_prefetch(line, _MM_HINT_T0);
}

// c[r] = a . w[r] for rows [r0, r1), 4 at a time: from 4 equal parts of the range (strided) or
// neighbours. The widening is the kernel's (cpu_vec.h VLoadPairs): a shift gives the even values,
// a mask the odd ones, against the activation split into its even and odd elements.
template <bool kStrided, Hint H>
void Rows(const float* even, const float* odd, const uint16_t* w, int64_t r0, int64_t r1,
          float* c) {
  const int64_t count = r1 - r0;
  const int64_t stride = kStrided ? count / 4 : 1;
  const int64_t blocks = kStrided ? stride : count / 4;
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t base = kStrided ? r0 + i : r0 + 4 * i;
    const uint16_t* row[4];
    __m256 ea[4], oa[4];
    for (int j = 0; j < 4; ++j) {
      row[j] = w + (base + j * stride) * kK;
      ea[j] = oa[j] = _mm256_setzero_ps();
    }
    for (int k = 0; k < kK; k += 16) {
      if (k % 32 == 0) {
        for (int j = 0; j < 4; ++j) Prefetch<H>(row[j] + k);
      }
      const __m256 ae = _mm256_loadu_ps(even + k / 2), ao = _mm256_loadu_ps(odd + k / 2);
      for (int j = 0; j < 4; ++j) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[j] + k));
        ea[j] = _mm256_fmadd_ps(ae, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), ea[j]);
        oa[j] = _mm256_fmadd_ps(
            ao, _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(-65536))), oa[j]);
      }
    }
    for (int j = 0; j < 4; ++j) {
      __m256 s = _mm256_add_ps(ea[j], oa[j]);
      __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
      h = _mm_hadd_ps(h, h);
      h = _mm_hadd_ps(h, h);
      c[base + j * stride] = _mm_cvtss_f32(h);
    }
  }
}

using RowsFn = void (*)(const float*, const float*, const uint16_t*, int64_t, int64_t, float*);

struct Variant {
  const char* name;
  RowsFn rows;
  double best_seconds = 1e30;
};

}  // namespace

int main(int argc, char** argv) {
  const int64_t chunk_mib = argc > 1 ? std::atoll(argv[1]) : 4;
  const int64_t total_rows = (int64_t{1} << 30) / (2 * kK);
  const int64_t chunk_rows = chunk_mib * (int64_t{1} << 20) / (2 * kK);
  if (chunk_rows < 8 || chunk_rows > total_rows) {
    std::fprintf(stderr, "CHUNK_MIB must be from 1 to 1024\n");
    return 1;
  }
  std::vector<uint16_t> w(static_cast<size_t>(total_rows * kK));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint16_t>(0x3c00 + i % 64);
  std::vector<float> even(kK / 2, 0.5f), odd(kK / 2, 0.25f), c(static_cast<size_t>(total_rows));
  Variant variants[] = {
      {"4 streams, nta", Rows<true, Hint::kNonTemporal>},
      {"4 streams, t0", Rows<true, Hint::kT0>},
      {"4 streams, none", Rows<true, Hint::kNone>},
      {"neighbours, nta", Rows<false, Hint::kNonTemporal>},
      {"neighbours, t0", Rows<false, Hint::kT0>},
      {"neighbours, none", Rows<false, Hint::kNone>},
  };
  for (int round = 0; round < 4; ++round) {
    for (Variant& v : variants) {
      const auto start = std::chrono::steady_clock::now();
      for (int64_t c0 = 0; c0 + chunk_rows <= total_rows; c0 += chunk_rows) {
#pragma omp parallel
        {
          const int t = omp_get_thread_num(), threads = omp_get_num_threads();
          v.rows(even.data(), odd.data(), w.data(), c0 + chunk_rows * t / threads,
                 c0 + chunk_rows * (t + 1) / threads, c.data());
        }
      }
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (s < v.best_seconds) v.best_seconds = s;
    }
  }
  const double bytes = static_cast<double>(total_rows / chunk_rows * chunk_rows) * kK * 2;
  std::printf("%d threads, GEMVs of %lld MiB over 1 GiB of bf16 weights (best of 4 rounds)\n",
              omp_get_max_threads(), static_cast<long long>(chunk_mib));
  for (const Variant& v : variants) {
    std::printf("  %-18s %6.1f GB/s\n", v.name, bytes / v.best_seconds / 1e9);
  }
  return 0;
}
