// An experiment, not part of the build: what the bf16 decode GEMV's widening costs on this CPU.
// Each variant streams one activation row against a [rows, 1024] bf16 matrix with 4 weight streams
// per thread, as GemvBf16Rows (runtime/cpu/cpu_gemm.cc) does, and the rounds alternate the
// variants:
//   shift+and 256  the kernel's widening (cpu_vec.h VLoadPairs): a shift gives the even values and
//                  a mask the odd ones, 256-bit registers
//   shift+and 128  the same in 128-bit registers (Zen 1 splits every 256-bit op in two anyway)
//   unpack 256     interleaving each word with zero (vpunpck{l,h}wd) instead of the shift and mask
//   no widening    FMAs on the raw 32-bit words (wrong values: the cost of the FMAs and loads
//   alone) read           a sum of the same words with the same 4 streams (no arithmetic to speak
//   of)
// Results in benchmarks/inference-results.md (session 20).
//
//   g++ -O2 -march=x86-64-v3 -pthread benchmarks/inference/bf16_gemv_variants.cc -o /tmp/variants
//   /tmp/variants ROWS REPS THREADS    (128 4000 1: weights in L2; 65536 5 2: 128 MiB from DRAM)
#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

constexpr int kK = 1024;
constexpr int kStreams = 4;

struct ShiftAnd256 {
  using Acc = __m256;
  static Acc Zero() { return _mm256_setzero_ps(); }
  // 16 weights at w against the even (ae) and odd (ao) activations.
  static void Step(const uint16_t* w, const float* ae, const float* ao, Acc& even, Acc& odd) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    __asm__("" : "+x"(v));  // one load, as in VLoadPairs
    even =
        _mm256_fmadd_ps(_mm256_loadu_ps(ae), _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), even);
    odd = _mm256_fmadd_ps(_mm256_loadu_ps(ao),
                          _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(-65536))), odd);
  }
  static float Sum(Acc a, Acc b) {
    float t[8];
    _mm256_storeu_ps(t, _mm256_add_ps(a, b));
    float s = 0;
    for (float x : t) s += x;
    return s;
  }
};

struct ShiftAnd128 {
  struct Acc {
    __m128 lo, hi;
  };
  static Acc Zero() { return {_mm_setzero_ps(), _mm_setzero_ps()}; }
  static __m128 Half(const uint16_t* w, const float* ae, const float* ao, __m128 even_acc,
                     __m128* odd_acc) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
    __asm__("" : "+x"(v));
    *odd_acc = _mm_fmadd_ps(_mm_loadu_ps(ao),
                            _mm_castsi128_ps(_mm_and_si128(v, _mm_set1_epi32(-65536))), *odd_acc);
    return _mm_fmadd_ps(_mm_loadu_ps(ae), _mm_castsi128_ps(_mm_slli_epi32(v, 16)), even_acc);
  }
  static void Step(const uint16_t* w, const float* ae, const float* ao, Acc& even, Acc& odd) {
    even.lo = Half(w, ae, ao, even.lo, &odd.lo);
    even.hi = Half(w + 8, ae + 4, ao + 4, even.hi, &odd.hi);
  }
  static float Sum(Acc a, Acc b) {
    float t[4];
    _mm_storeu_ps(t, _mm_add_ps(_mm_add_ps(a.lo, a.hi), _mm_add_ps(b.lo, b.hi)));
    return t[0] + t[1] + t[2] + t[3];
  }
};

struct Unpack256 : ShiftAnd256 {
  static void Step(const uint16_t* w, const float* ae, const float* ao, Acc& even, Acc& odd) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    __asm__("" : "+x"(v));
    const __m256i zero = _mm256_setzero_si256();
    even = _mm256_fmadd_ps(_mm256_loadu_ps(ae), _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, v)),
                           even);
    odd = _mm256_fmadd_ps(_mm256_loadu_ps(ao), _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, v)),
                          odd);
  }
};

struct NoWidening : ShiftAnd256 {
  static void Step(const uint16_t* w, const float* ae, const float* ao, Acc& even, Acc& odd) {
    __m256 v = _mm256_loadu_ps(reinterpret_cast<const float*>(w));
    __asm__("" : "+x"(v));
    even = _mm256_fmadd_ps(_mm256_loadu_ps(ae), v, even);
    odd = _mm256_fmadd_ps(_mm256_loadu_ps(ao), v, odd);
  }
};

struct Read {
  using Acc = __m256i;
  static Acc Zero() { return _mm256_setzero_si256(); }
  static void Step(const uint16_t* w, const float*, const float*, Acc& even, Acc&) {
    even = _mm256_add_epi64(even, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)));
  }
  static float Sum(Acc a, Acc) { return static_cast<float>(_mm256_extract_epi64(a, 0)); }
};

// c[i] for rows [0, rows) of b, kStreams rows at once taken from kStreams equal parts.
template <typename V>
void Gemv(const uint16_t* b, int rows, const float* even, const float* odd, float* c) {
  const int stride = rows / kStreams;
  for (int i = 0; i < stride; ++i) {
    typename V::Acc e[kStreams], o[kStreams];
    for (int j = 0; j < kStreams; ++j) e[j] = o[j] = V::Zero();
    for (int k = 0; k < kK; k += 16) {
#pragma GCC unroll 4
      for (int j = 0; j < kStreams; ++j) {
        V::Step(b + static_cast<size_t>(i + j * stride) * kK + k, even + k / 2, odd + k / 2, e[j],
                o[j]);
      }
    }
    for (int j = 0; j < kStreams; ++j) c[i + j * stride] = V::Sum(e[j], o[j]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s ROWS REPS THREADS\n", argv[0]);
    return 2;
  }
  const int rows = std::atoi(argv[1]), reps = std::atoi(argv[2]), threads = std::atoi(argv[3]);
  if (rows < kStreams * threads || reps < 1 || threads < 1) {
    std::fprintf(stderr, "ROWS must be at least 4 x THREADS, REPS and THREADS at least 1\n");
    return 2;
  }
  std::vector<uint16_t> b(static_cast<size_t>(rows) * kK);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint16_t>(0x3f80 + i * 7 % 64);
  std::vector<float> even(kK / 2, 0.5f), odd(kK / 2, 0.25f), c(static_cast<size_t>(rows));
  using Fn = void (*)(const uint16_t*, int, const float*, const float*, float*);
  const Fn fns[] = {Gemv<ShiftAnd256>, Gemv<ShiftAnd128>, Gemv<Unpack256>, Gemv<NoWidening>,
                    Gemv<Read>};
  const char* names[] = {"shift+and 256", "shift+and 128", "unpack 256", "no widening", "read"};
  constexpr int kVariants = 5;
  auto run = [&](Fn fn) {
    std::vector<std::thread> workers;
    const int per = rows / threads;
    for (int t = 1; t < threads; ++t) {
      workers.emplace_back([&, t] {
        fn(b.data() + static_cast<size_t>(t) * per * kK, per, even.data(), odd.data(),
           c.data() + static_cast<size_t>(t) * per);
      });
    }
    fn(b.data(), per, even.data(), odd.data(), c.data());
    for (auto& w : workers) w.join();
  };
  std::printf("%d rows x %d bf16 (%.1f MiB), %d threads, GB/s of weights; last column: / read\n",
              rows, kK, 2.0 * rows * kK / (1 << 20), threads);
  for (int round = 0; round < 3; ++round) {
    double rate[kVariants];
    for (int v = 0; v < kVariants; ++v) {
      run(fns[v]);
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps; ++r) run(fns[v]);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rate[v] = 2.0 * rows * kK * reps / s / 1e9;
    }
    for (int v = 0; v < kVariants; ++v) {
      std::printf("round %d  %-14s %6.2f  %.2f\n", round + 1, names[v], rate[v],
                  rate[v] / rate[kVariants - 1]);
    }
  }
  return 0;
}
