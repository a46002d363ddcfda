// How fast can a read-only workload stream from DRAM on this machine, and does it depend on how
// many streams each thread reads at once? (issue 18: decode only reads weights, and its goal is a
// share of STREAM's bandwidth.) Runnable by hand and from bandwidth_window.sh; not part of CI.
//
//   gcc -O2 -march=native -fopenmp benchmarks/inference/read_streams.c -o read_streams
//   OMP_NUM_THREADS=2 ./read_streams [PASSES]
//
// Each pass sums a 1 GiB array (AVX2 loads, 128 bytes a step), the threads claiming chunks of
// CHUNK bytes from one counter as the GEMVs claim their ranges (runtime/cpu/cpu_gemm.cc); within a
// chunk, S streams: the chunk is cut into S equal parts read in turn, 128 bytes of each. S = 1 is
// one sequential stream per thread. A memcpy between two 512 MiB arrays, counted as bytes read +
// written (STREAM's Copy rule), runs in each pass for reference. Best of PASSES (default 5),
// STREAM's rule.
#include <immintrin.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile long long sink;

static double ReadPass(const char* buf, size_t bytes, size_t chunk, int streams) {
  _Atomic size_t next = 0;
  long long total = 0;
  const double t0 = omp_get_wtime();
#pragma omp parallel reduction(+ : total)
  {
    __m256i acc0 = _mm256_setzero_si256(), acc1 = acc0;
    for (size_t lo = atomic_fetch_add(&next, chunk); lo < bytes;
         lo = atomic_fetch_add(&next, chunk)) {
      const size_t part = chunk / (size_t)streams;
      for (size_t off = 0; off < part; off += 128) {
        for (int s = 0; s < streams; ++s) {
          const char* p = buf + lo + (size_t)s * part + off;
          acc0 = _mm256_add_epi64(acc0, _mm256_load_si256((const __m256i*)p));
          acc1 = _mm256_add_epi64(acc1, _mm256_load_si256((const __m256i*)(p + 32)));
          acc0 = _mm256_add_epi64(acc0, _mm256_load_si256((const __m256i*)(p + 64)));
          acc1 = _mm256_add_epi64(acc1, _mm256_load_si256((const __m256i*)(p + 96)));
        }
      }
    }
    long long v[4];
    _mm256_storeu_si256((__m256i*)v, _mm256_add_epi64(acc0, acc1));
    total += v[0] + v[1] + v[2] + v[3];
  }
  sink = total;
  return (double)bytes / (omp_get_wtime() - t0) / 1e9;
}

static double CopyPass(char* dst, const char* src, size_t bytes) {
  const double t0 = omp_get_wtime();
#pragma omp parallel
  {
    const size_t share = bytes / (size_t)omp_get_num_threads();
    const size_t at = share * (size_t)omp_get_thread_num();
    memcpy(dst + at, src + at, share);
  }
  return 2.0 * (double)bytes / (omp_get_wtime() - t0) / 1e9;
}

int main(int argc, char** argv) {
  const int passes = argc > 1 ? atoi(argv[1]) : 5;
  const size_t bytes = (size_t)1 << 30;
  char* a = aligned_alloc((size_t)2 << 20, bytes);
  char* b = aligned_alloc((size_t)2 << 20, bytes / 2);
  char* c = aligned_alloc((size_t)2 << 20, bytes / 2);
  if (a == NULL || b == NULL || c == NULL) {
    fprintf(stderr, "read_streams: cannot allocate 2 GiB\n");
    return 1;
  }
  memset(a, 1, bytes);
  memset(b, 2, bytes / 2);
  memset(c, 3, bytes / 2);
  const struct {
    size_t chunk;
    int streams;
  } cases[] = {{65536, 1}, {65536, 2}, {65536, 4}, {65536, 8}, {262144, 4}, {bytes / 64, 8}};
  enum { kCases = sizeof cases / sizeof cases[0] };
  double best[kCases] = {0}, best_copy = 0;
  for (int p = 0; p < passes; ++p) {
    const double copy = CopyPass(b, c, bytes / 2);
    if (copy > best_copy) best_copy = copy;
    for (int i = 0; i < kCases; ++i) {
      const double read = ReadPass(a, bytes, cases[i].chunk, cases[i].streams);
      if (read > best[i]) best[i] = read;
    }
  }
  printf("read_streams: %d threads, best of %d passes; copy (memcpy, read + written) %.2f GB/s\n",
         omp_get_max_threads(), passes, best_copy);
  for (int i = 0; i < kCases; ++i) {
    printf(
        "read_streams: chunks of %zu KiB, %d stream(s) per thread: %.2f GB/s, %.3f of the copy\n",
        cases[i].chunk >> 10, cases[i].streams, best[i], best[i] / best_copy);
  }
  free(a);
  free(b);
  free(c);
  return 0;
}
