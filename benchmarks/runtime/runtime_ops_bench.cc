// Microbenchmarks of the CPU backend: GEMM (f32 through our backend next to OpenBLAS called
// directly, bf16, f16, q8_0 and q4_0 weights), bf16 x bf16 on AVX512-BF16 (next to OpenBLAS on f32
// copies), grouped GEMM (next to one OpenBLAS call per expert), attention decode over a KV cache,
// and the dtype conversions. Counters report GFLOP/s (flops) and GB/s (bytes) per second of wall
// time.
//
// The memory-bound kernels (decode GEMV, attention decode, conversions) are measured against
// baselines in the same run: BM_StreamRead reads the same number of bytes on the backend's thread
// pool, BM_Memcpy copies them on one thread. Their ratio is how close a kernel gets to the
// machine's memory bandwidth. benchmarks/runtime-results.md records a run.
//
//   build/benchmarks/runtime/runtime_ops_bench --benchmark_min_time=0.3
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "runtime/core/quant_blocks.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/cpu_bf16_gemm.h"
#include "runtime/cpu/memory_bandwidth.h"

namespace sy {
namespace {

CpuBackend& Cpu() {
  static auto* backend = new CpuBackend();
  return *backend;
}

Tensor Random(DType dtype, Shape shape, uint64_t seed) {
  Tensor f = Tensor::Host(DType::kF32, shape);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.5f);
  for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = dist(rng);
  if (dtype == DType::kF32) return f;
  Tensor t = Tensor::Host(dtype, shape);
  if (IsQuantized(dtype)) {
    QuantizeBlocks(dtype, f.data<float>(), t.data(), f.numel());
    return t;
  }
  SY_CHECK_OK(
      ConvertBuffer(f.data(), DType::kF32, t.data(), dtype, static_cast<size_t>(f.numel())));
  return t;
}

void SetGemmCounters(benchmark::State& state, int64_t m, int64_t n, int64_t k, size_t b_bytes) {
  double flops = 2.0 * static_cast<double>(m * n * k);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  double bytes = static_cast<double>(b_bytes + 4 * (m * k + m * n));
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// y = x * W^T, W [N,K] as a Linear weight; args: M, N, K.
void BM_GemmBackend(benchmark::State& state, DType weight_dtype) {
  int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  Tensor x = Random(DType::kF32, {m, k}, 1);
  Tensor w = Random(weight_dtype, {n, k}, 2);
  Tensor y = Tensor::Host(DType::kF32, {m, n});
  for (auto _ : state) {
    Cpu().Gemm(x, w, y, {.trans_b = true});
    benchmark::DoNotOptimize(y.data());
  }
  SetGemmCounters(state, m, n, k, w.nbytes());
}

void BM_GemmOpenBlasDirect(benchmark::State& state) {
  int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  Cpu();  // same OpenBLAS thread count as the backend
  Tensor x = Random(DType::kF32, {m, k}, 1);
  Tensor w = Random(DType::kF32, {n, k}, 2);
  Tensor y = Tensor::Host(DType::kF32, {m, n});
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, x.data<float>(), static_cast<int>(k), w.data<float>(),
                static_cast<int>(k), 0.0f, y.data<float>(), static_cast<int>(n));
    benchmark::DoNotOptimize(y.data());
  }
  SetGemmCounters(state, m, n, k, w.nbytes());
}

void GemmShapes(benchmark::internal::Benchmark* b) {
  b->Args({1, 4096, 4096});  // decode GEMV, 64 MiB f32 weight: memory bound
  // A decode GEMV whose weight stays in L2 (256 KiB in bf16): the kernel's own compute rate,
  // which has to stay well above the memory's for the big one to be memory bound. Run it with
  // SY_NUM_THREADS=1 and read the CPU time, which a loaded machine does not inflate.
  b->Args({1, 128, 1024});
  b->Args({8, 4096, 4096});
  b->Args({128, 1024, 1024});
  b->Args({512, 1024, 1024});  // prefill / training: compute bound
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK_CAPTURE(BM_GemmBackend, f32, DType::kF32)->Apply(GemmShapes);
BENCHMARK(BM_GemmOpenBlasDirect)->Apply(GemmShapes);
BENCHMARK_CAPTURE(BM_GemmBackend, bf16, DType::kBF16)->Apply(GemmShapes);
BENCHMARK_CAPTURE(BM_GemmBackend, f16, DType::kF16)->Apply(GemmShapes);

// bf16 x bf16 -> f32 on AVX512-BF16 (cpu::Bf16Gemm) on a ThreadPool(2), against cblas_sgemm on
// f32 copies of the same values with OpenBLAS on 2 threads: the products of mixed-precision
// training at hidden 512, expert width 1024. args: M, N, K, trans_a, trans_b.
constexpr int kBf16GemmThreads = 2;

struct Bf16GemmOperands {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  Tensor a, b;  // bf16, as stored: a [M,K] or [K,M], b [K,N] or [N,K]
};

Bf16GemmOperands MakeBf16GemmOperands(const benchmark::State& state) {
  Bf16GemmOperands o;
  o.m = state.range(0);
  o.n = state.range(1);
  o.k = state.range(2);
  o.trans_a = state.range(3) != 0;
  o.trans_b = state.range(4) != 0;
  o.a = Random(DType::kBF16, o.trans_a ? Shape{o.k, o.m} : Shape{o.m, o.k}, 11);
  o.b = Random(DType::kBF16, o.trans_b ? Shape{o.n, o.k} : Shape{o.k, o.n}, 12);
  return o;
}

void BM_Bf16Gemm(benchmark::State& state) {
  if (!cpu::Bf16DotProducts()) {
    state.SkipWithError("no AVX512-BF16 on this CPU (or SY_CPU_BF16_DOT=0)");
    return;
  }
  static ThreadPool* pool = new ThreadPool(kBf16GemmThreads);
  const Bf16GemmOperands o = MakeBf16GemmOperands(state);
  Tensor c = Tensor::Host(DType::kF32, {o.m, o.n});
  const cpu::Bf16GemmArgs args{.m = o.m,
                               .n = o.n,
                               .k = o.k,
                               .a = o.a.data<BF16>(),
                               .lda = o.trans_a ? o.m : o.k,
                               .trans_a = o.trans_a,
                               .b = o.b.data<BF16>(),
                               .ldb = o.trans_b ? o.k : o.n,
                               .trans_b = o.trans_b,
                               .c = c.data<float>(),
                               .ldc = o.n};
  for (auto _ : state) {
    cpu::Bf16Gemm(*pool, args);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(o.m * o.n * o.k) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Bf16GemmOpenBlasF32(benchmark::State& state) {
  const Bf16GemmOperands o = MakeBf16GemmOperands(state);
  Tensor a = Tensor::Host(DType::kF32, o.a.shape()), b = Tensor::Host(DType::kF32, o.b.shape());
  SY_CHECK_OK(ConvertBuffer(o.a.data(), DType::kBF16, a.data(), DType::kF32,
                            static_cast<size_t>(a.numel())));
  SY_CHECK_OK(ConvertBuffer(o.b.data(), DType::kBF16, b.data(), DType::kF32,
                            static_cast<size_t>(b.numel())));
  Tensor c = Tensor::Host(DType::kF32, {o.m, o.n});
  const int threads = openblas_get_num_threads();
  openblas_set_num_threads(kBf16GemmThreads);
  for (auto _ : state) {
    cblas_sgemm(
        CblasRowMajor, o.trans_a ? CblasTrans : CblasNoTrans, o.trans_b ? CblasTrans : CblasNoTrans,
        static_cast<int>(o.m), static_cast<int>(o.n), static_cast<int>(o.k), 1.0f, a.data<float>(),
        static_cast<int>(o.trans_a ? o.m : o.k), b.data<float>(),
        static_cast<int>(o.trans_b ? o.k : o.n), 0.0f, c.data<float>(), static_cast<int>(o.n));
    benchmark::DoNotOptimize(c.data());
  }
  openblas_set_num_threads(threads);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(o.m * o.n * o.k) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void Bf16GemmShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "n", "k", "ta", "tb"});
  b->Args({1024, 512, 512, 0, 1});    // forward, x [1024,512] W [512,512]^T (a Linear weight)
  b->Args({256, 1024, 512, 0, 1});    // forward, an expert's up projection: W [1024,512]^T
  b->Args({1024, 512, 512, 0, 0});    // backward dx = dy W, W [512,512]
  b->Args({256, 512, 1024, 0, 0});    // backward dx = dy W through the expert's W [1024,512]
  b->Args({512, 512, 1024, 1, 0});    // dW = dy^T x over 1024 rows, W [512,512]
  b->Args({1024, 512, 256, 1, 0});    // dW = dy^T x over an expert's 256 rows, W [1024,512]
  b->Args({1024, 1024, 1024, 0, 1});  // forward, 1024 tokens through W [1024,1024]^T
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_Bf16Gemm)->Apply(Bf16GemmShapes);
BENCHMARK(BM_Bf16GemmOpenBlasF32)->Apply(Bf16GemmShapes);

// Quantized weights on an expert's gate projection (N 2048, K 1024): M up to
// kInt8ActivationMaxRows (64) runs the int8 GEMV kernels, M = 65 and up dequantized panels and
// OpenBLAS; the per-row cost on either side of 64 shows where one overtakes the other.
// Two decode GEMVs beside them: one whose weight stays in L2 (N 256: 144 KiB in q4_0, 272 KiB in
// q8_0), the kernel's own rate per byte (run with SY_NUM_THREADS=1 and read the CPU time), and
// one that streams from DRAM (N 32768: 18 / 34 MiB, beyond the L3).
void QuantGemmShapes(benchmark::internal::Benchmark* b) {
  b->Args({1, 256, 1024});
  b->Args({1, 32768, 1024});
  for (int64_t m : {1, 4, 8, 16, 32, 64, 65, 128}) b->Args({m, 2048, 1024});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK_CAPTURE(BM_GemmBackend, q8_0, DType::kQ8_0)->Apply(QuantGemmShapes);
BENCHMARK_CAPTURE(BM_GemmBackend, q4_0, DType::kQ4_0)->Apply(QuantGemmShapes);

// The memory bandwidth the decode kernels are bounded by: a read of `bytes` split over the
// backend's thread pool (the GEMV kernels' split), summing 64-bit words so that the loop
// vectorises without reassociating floats. arg: bytes.
void BM_StreamRead(benchmark::State& state) {
  const int64_t words = state.range(0) / 8;
  std::vector<uint64_t> buffer(static_cast<size_t>(words));
  for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = i * 0x9e3779b97f4a7c15ull;
  ThreadPool& pool = Cpu().pool();
  for (auto _ : state) benchmark::DoNotOptimize(cpu::StreamRead(pool, buffer));
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(words * 8) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = static_cast<double>(pool.num_threads());
}
BENCHMARK(BM_StreamRead)
    ->Arg(int64_t{32} << 20)   // a bf16 4096x4096 weight; the K+V of BM_AttentionDecode/1/32/8/4096
    ->Arg(int64_t{64} << 20)   // an f32 4096x4096 weight
    ->Arg(int64_t{256} << 20)  // well past the last-level cache: DRAM bandwidth
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// One-thread copy of `bytes`, the baseline of the (single-threaded) conversions. GB/s counts the
// bytes read plus the bytes written, as BM_Convert does. arg: bytes.
void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(2 * bytes) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Memcpy)->Arg(int64_t{16} << 20)->Unit(benchmark::kMicrosecond)->UseRealTime();

// MoE experts: E experts of [F,H] weights, R routed rows spread evenly; args: E, R, H, F.
void BM_GroupedGemm(benchmark::State& state, DType weight_dtype) {
  int64_t experts = state.range(0), rows = state.range(1), h = state.range(2), f = state.range(3);
  Tensor x = Random(DType::kF32, {rows, h}, 3);
  Tensor w = Random(weight_dtype, {experts, f, h}, 4);
  Tensor y = Tensor::Host(DType::kF32, {rows, f});
  std::vector<int64_t> groups(static_cast<size_t>(experts), rows / experts);
  groups.back() += rows % experts;
  for (auto _ : state) {
    Cpu().GroupedGemm(x, w, y, groups, {.trans_b = true});
    benchmark::DoNotOptimize(y.data());
  }
  SetGemmCounters(state, rows, f, h, w.nbytes());
}

// The same grouped product as one cblas_sgemm per expert, the baseline of BM_GroupedGemm/f32.
void BM_GroupedGemmOpenBlasLoop(benchmark::State& state) {
  int64_t experts = state.range(0), rows = state.range(1), h = state.range(2), f = state.range(3);
  Cpu();  // same OpenBLAS thread count as the backend
  Tensor x = Random(DType::kF32, {rows, h}, 3);
  Tensor w = Random(DType::kF32, {experts, f, h}, 4);
  Tensor y = Tensor::Host(DType::kF32, {rows, f});
  std::vector<int64_t> groups(static_cast<size_t>(experts), rows / experts);
  groups.back() += rows % experts;
  for (auto _ : state) {
    int64_t r0 = 0;
    for (int64_t e = 0; e < experts; ++e) {
      const int64_t r = groups[static_cast<size_t>(e)];
      if (r > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(r),
                    static_cast<int>(f), static_cast<int>(h), 1.0f, x.data<float>() + r0 * h,
                    static_cast<int>(h), w.data<float>() + e * f * h, static_cast<int>(h), 0.0f,
                    y.data<float>() + r0 * f, static_cast<int>(f));
      }
      r0 += r;
    }
    benchmark::DoNotOptimize(y.data());
  }
  SetGemmCounters(state, rows, f, h, w.nbytes());
}

void GroupedShapesF32(benchmark::internal::Benchmark* b) {
  b->Args({8, 256, 1024, 2048});
  b->Args({64, 512, 512, 1024});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK_CAPTURE(BM_GroupedGemm, f32, DType::kF32)->Apply(GroupedShapesF32);
BENCHMARK(BM_GroupedGemmOpenBlasLoop)->Apply(GroupedShapesF32);
BENCHMARK_CAPTURE(BM_GroupedGemm, bf16, DType::kBF16)
    ->Args({8, 256, 1024, 2048})
    ->Args({8, 8, 1024, 2048})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// One decode step of attention: B sequences, Hq query heads over Hkv kv heads, D=128, a cache
// of S positions. args: B, Hq, Hkv, S.
void BM_AttentionDecode(benchmark::State& state) {
  int64_t b = state.range(0), hq = state.range(1), hkv = state.range(2), s = state.range(3);
  const int64_t d = 128;
  Tensor q = Random(DType::kF32, {b, 1, hq, d}, 5);
  Tensor k = Random(DType::kF32, {b, s, hkv, d}, 6);
  Tensor v = Random(DType::kF32, {b, s, hkv, d}, 7);
  Tensor out = Tensor::Host(DType::kF32, {b, 1, hq, d});
  AttentionOptions options;
  options.scale = 0.088f;
  options.kv_lens.assign(static_cast<size_t>(b), static_cast<int32_t>(s));
  for (auto _ : state) {
    Cpu().Attention(q, k, v, out, Tensor(), options);
    benchmark::DoNotOptimize(out.data());
  }
  double kv_bytes = static_cast<double>(k.nbytes() + v.nbytes());
  state.counters["GB/s"] =
      benchmark::Counter(kv_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * b * hq * s * d * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttentionDecode)
    ->Args({1, 32, 8, 4096})
    ->Args({8, 32, 8, 1024})
    // The decode-bench model's attention (8 query heads over 2 kv heads) at 150, 300 and 1000
    // keys.
    ->Args({1, 8, 2, 150})
    ->Args({1, 8, 2, 300})
    ->Args({1, 8, 2, 1000})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

template <typename Src, typename Dst, void (*Fn)(const Src*, Dst*, size_t)>
void BM_Convert(benchmark::State& state) {
  size_t n = static_cast<size_t>(state.range(0));
  std::vector<Src> src(n);
  std::vector<Dst> dst(n);
  std::mt19937 rng(8);
  for (auto& v : src) {
    if constexpr (std::is_same_v<Src, float>) {
      v = std::uniform_real_distribution<float>(-4, 4)(rng);
    } else {
      v = Src{static_cast<uint16_t>(rng() & 0x7bff)};
    }
  }
  for (auto _ : state) {
    Fn(src.data(), dst.data(), n);
    benchmark::DoNotOptimize(dst.data());
  }
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(n * (sizeof(Src) + sizeof(Dst))) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Convert<float, BF16, ConvertF32ToBF16>)->Arg(1 << 22)->UseRealTime();
BENCHMARK(BM_Convert<BF16, float, ConvertBF16ToF32>)->Arg(1 << 22)->UseRealTime();
BENCHMARK(BM_Convert<float, F16, ConvertF32ToF16>)->Arg(1 << 22)->UseRealTime();
BENCHMARK(BM_Convert<F16, float, ConvertF16ToF32>)->Arg(1 << 22)->UseRealTime();

}  // namespace
}  // namespace sy

BENCHMARK_MAIN();
