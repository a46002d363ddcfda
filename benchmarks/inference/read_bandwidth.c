// Pure read bandwidth, the yardstick for a decode step (which only reads its weights): OpenMP
// threads (OMP_NUM_THREADS) sum a 1 GiB array of doubles with AVX2 loads, 10 passes; prints the
// best of the last 9 (STREAM's rule). bandwidth_window.sh builds and runs it.
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
  const size_t n = (size_t)1 << 27;  // 128 Mi doubles = 1 GiB
  double* a = aligned_alloc(64, n * sizeof(double));
  if (a == NULL) {
    fprintf(stderr, "read_bandwidth: cannot allocate 1 GiB\n");
    return 1;
  }
#pragma omp parallel for
  for (size_t i = 0; i < n; i++) a[i] = 1.0;
  double best = 1e30, checksum = 0;
  for (int pass = 0; pass < 10; pass++) {
    double t = Now(), total = 0;
#pragma omp parallel reduction(+ : total)
    {
      __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
#pragma omp for
      for (size_t i = 0; i < n; i += 16) {
        s0 = _mm256_add_pd(s0, _mm256_load_pd(a + i));
        s1 = _mm256_add_pd(s1, _mm256_load_pd(a + i + 4));
        s2 = _mm256_add_pd(s2, _mm256_load_pd(a + i + 8));
        s3 = _mm256_add_pd(s3, _mm256_load_pd(a + i + 12));
      }
      double v[4];
      _mm256_storeu_pd(v, _mm256_add_pd(_mm256_add_pd(s0, s1), _mm256_add_pd(s2, s3)));
      total += v[0] + v[1] + v[2] + v[3];
    }
    t = Now() - t;
    if (pass > 0 && t < best) best = t;
    checksum += total;
  }
  if (checksum != 10.0 * (double)n) {
    fprintf(stderr, "read_bandwidth: wrong sum %g\n", checksum);
    return 1;
  }
  printf("read: %.1f GB/s (best of 9 passes over 1 GiB, %d threads)\n",
         (double)(n * sizeof(double)) / best / 1e9, omp_get_max_threads());
  free(a);
  return 0;
}
