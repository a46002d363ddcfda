// GEMM operators of the CPU backend.
//
// f32 weights go straight to OpenBLAS. bf16/f16 weights are never expanded whole:
//  - decode shapes (M <= kGemvMaxRows) run a GEMV kernel that widens the weight in registers and
//    streams it once, split over the thread pool along N (bf16 with b [N,K]: GemvBf16Rows, which
//    widens pairs of values with a shift and a mask against an activation split into its even
//    and odd elements). This is the memory-bound hot path of
//    offloaded inference, so it reads each weight byte exactly once. With b [N,K] the pool's
//    threads claim ranges of rows from one counter, long ones first and none under 64 KiB
//    (ClaimRanges, a guided schedule), and a grouped GEMM whose
//    groups are all GEMVs (a decode step's experts) runs every group's rows in one such region.
//  - larger M widens one panel of the weight at a time (at most kPanelBytes of f32, contiguous in
//    both layouts) into a per-thread scratch and hands the panel to cblas_sgemm.
// A bf16 b [N,K] stays on its GEMV kernel up to kBf16GemvMaxRows rows (a short prefill's
// attention, and its tokens grouped per expert): past 4 rows each thread's range of weights is cut
// into L2-sized tiles, and each tile meets the rows 4 at a time, so each weight byte is still read
// once from memory, where a widened panel writes and reads 4 bytes of f32 per weight.
// Quantized weights (q8_0, q4_0, the k-quants, always b [N,K]) take the same two paths: the GEMV
// kernels of cpu_quant.h in the same row ranges and tiles, and dequantized panels for larger M.
// They round the activations to 8 bits once per operator and run the integer kernels up to
// kQuantGemvMaxRows rows per group.
// A 16-bit a (mixed-precision training's activations, Note [16-bit operands]) times a bf16 b runs
// on the bf16 dot products (cpu_bf16_gemm.h) where the CPU has them and op(a) has at least
// kBf16DotMinRows rows; otherwise a is widened to f32 (exactly) and takes the paths above. A 16-bit
// c is computed in f32 and rounded once. The grouped GEMMs with bf16 operands run a Gemm per group.
// OpenBLAS is multithreaded by itself, so it is only ever called from the operator's thread, never
// from inside a ParallelFor body.
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "runtime/core/quant_blocks.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/cpu_bf16_gemm.h"
#include "runtime/cpu/cpu_op_util.h"
#include "runtime/cpu/cpu_quant.h"
#include "runtime/cpu/cpu_vec.h"
#include "runtime/cpu/cpu_widened.h"

namespace sy {
namespace {

using cpu::kLanes;
using cpu::VecF;

constexpr int64_t kGemvMaxRows = 4;
// Rows per group up to which a bf16 b [N,K] takes the GEMV kernel rather than widened panels and
// OpenBLAS: each weight byte is read once from memory and met in L2 by the rows 4 at a time
// (GemvTransB's tiles), where a panel writes and reads 4 bytes of f32 per weight. On an Intel Xeon
// (2 threads, the decode-bench model, session 23) a 32-token prefill, whose experts get about 8
// rows each and attention 32, ran 2.2-2.5x faster with a bound of 32 or 64 than with 4; a
// 512-token prefill (about 128 rows an expert) ran alike with 64 and slower with 128 (0.86x),
// 256 (0.70x) or every row (0.63x), where OpenBLAS's blocking wins.
constexpr int64_t kBf16GemvMaxRows = 64;
// Weights per tile of a GEMV with more than 4 rows: a tile is met by every 4 rows in turn while
// it stays in L2. 32, 64 and 128 KiB ran alike on a 32-token prefill; 64 KiB was the fastest on a
// 512-token one (session 23).
constexpr int64_t kGemvTileBytes = int64_t{64} << 10;
// Rows per group up to which quantized weights take the integer GEMV kernels rather than
// dequantized panels and OpenBLAS: the backend contract's bound (quant_blocks.h).
constexpr int64_t kQuantGemvMaxRows = kInt8ActivationMaxRows;
constexpr int64_t kPanelBytes = int64_t{4} << 20;
// AVX-512 has 32 vector registers, AVX2 16: keep MR x NR accumulators plus NR weights in them.
constexpr int kTransBNr = kLanes >= 16 ? 4 : 2;

struct GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  bool trans_a = false;
  const void* b = nullptr;
  DType b_dtype = DType::kF32;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;
  float* c = nullptr;  // [m, n], ldc = n
};

// The most rows of a whose product with b runs on the GEMV kernels.
int64_t GemvMaxRows(DType b_dtype, bool trans_b) {
  if (IsQuantized(b_dtype)) return kQuantGemvMaxRows;
  if (b_dtype == DType::kBF16 && trans_b) return kBf16GemvMaxRows;
  return kGemvMaxRows;
}

// Scratch that lives as long as the calling thread, so steady-state decoding allocates nothing.
template <typename T>
T* ThreadScratch(std::vector<T>& storage, size_t n) {
  if (storage.size() < n) storage.resize(n);
  return storage.data();
}

inline float Finish(float acc, float alpha, float beta, const float* c) {
  return beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
}

void Sgemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, bool trans_a,
           const float* b, int64_t ldb, bool trans_b, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    cpu::ScaleMatrix(c, m, n, ldc, beta);
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(std::max<int64_t>(1, lda)), b,
              static_cast<blasint>(std::max<int64_t>(1, ldb)), beta, c,
              static_cast<blasint>(std::max<int64_t>(1, ldc)));
}

// ---- GEMV, b [N,K] (trans_b): c[m, n] = alpha * a[m,:] . b[n,:] + beta * c[m, n] ----

template <typename W, int MR, int NR>
void GemvTransBBlock(const float* a, int64_t k_dim, const W* b, int64_t n, float* c, int64_t ldc,
                     float alpha, float beta) {
  VecF acc[MR][NR];
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) acc[m][j] = cpu::VZero();
  }
  const W* brow[NR];
#pragma GCC unroll 4
  for (int j = 0; j < NR; ++j) brow[j] = b + (n + j) * k_dim;
  int64_t k = 0;
  for (; k + kLanes <= k_dim; k += kLanes) {
    VecF bv[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) bv[j] = cpu::VLoad(brow[j] + k);
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      VecF av = cpu::VLoad(a + m * k_dim + k);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[m][j] = cpu::VFma(av, bv[j], acc[m][j]);
    }
  }
  for (int m = 0; m < MR; ++m) {
    for (int j = 0; j < NR; ++j) {
      float s = cpu::VReduceAdd(acc[m][j]);
      for (int64_t kk = k; kk < k_dim; ++kk) s += a[m * k_dim + kk] * cpu::SLoad(brow[j] + kk);
      float* dst = c + m * ldc + n + j;
      *dst = Finish(s, alpha, beta, dst);
    }
  }
}

template <typename W, int MR>
void GemvTransBRange(const float* a, int64_t n_dim, int64_t k_dim, const W* b, float* c,
                     int64_t ldc, float alpha, float beta, int64_t block_begin, int64_t block_end) {
  for (int64_t blk = block_begin; blk < block_end; ++blk) {
    int64_t n = blk * kTransBNr;
    if (n + kTransBNr <= n_dim) {
      GemvTransBBlock<W, MR, kTransBNr>(a, k_dim, b, n, c, ldc, alpha, beta);
    } else {
      for (; n < n_dim; ++n) GemvTransBBlock<W, MR, 1>(a, k_dim, b, n, c, ldc, alpha, beta);
    }
  }
}

// ---- GEMV with a bf16 b [N,K] (trans_b): the decode hot path ----
//
// Each activation row is split once per call into its even and its odd elements (SplitPairs),
// so that the weights widen with one shift and one mask per 2 * kLanes values (VLoadPairs)
// instead of a zero-extension and a shift per kLanes, and every weight row feeds two FMA chains.
// NR rows at once give 2 * NR independent chains (Zen's FMA has a latency of 5 cycles). On the
// 2-core AVX2 EPYC an L2-resident GEMV (runtime_ops_bench BM_GemmBackend/bf16/1/128/1024, one
// thread, CPU time) went from 12 to 20 GB/s of weights per core: the widening kernel per row
// had too little headroom over the ~7.5 GB/s per core DRAM gives to stay memory bound.

constexpr int64_t kPairStep = 2 * kLanes;

// Each weight stream is prefetched once per 64-byte line, this far ahead, with the hint chosen for
// the CPU (cpu::PrefetchOnce, weight_prefetch.h). On the Zen 1 test machine the hardware
// prefetchers already kept the streams fed (a prefetch with the ordinary hint, 0.5-2 KiB ahead,
// only cost: session 18), and what the non-temporal one added is that the weights no longer evict
// the rest of the step from L2 and L3; 256 B to 1 KiB ahead measured alike, 2 KiB less well
// (benchmarks/inference-results.md, session 20). On an Intel Xeon the ordinary hint at 512 B
// doubled the step's weight rate against the non-temporal one (session 23).
constexpr int64_t kBf16PrefetchBytes = 512;
constexpr int64_t kLineValues = 64 / static_cast<int64_t>(sizeof(BF16));

// The part of K the pair kernel covers; the rest (K % kPairStep) is summed from a directly.
inline int64_t PairBody(int64_t k_dim) { return k_dim - k_dim % kPairStep; }

// pairs[m] = the even elements of a[m, :body], then its odd ones: [rows, body].
void SplitPairs(const float* a, int64_t rows, int64_t k_dim, float* pairs) {
  const int64_t body = PairBody(k_dim), half = body / 2;
  for (int64_t m = 0; m < rows; ++m) {
    const float* src = a + m * k_dim;
    float* even = pairs + m * body;
    float* odd = even + half;
    for (int64_t i = 0; i < half; ++i) {
      even[i] = src[2 * i];
      odd[i] = src[2 * i + 1];
    }
  }
}

template <int MR, int NR>
void GemvBf16Block(const float* a, const float* pairs, int64_t k_dim, const BF16* b, int64_t n,
                   int64_t stride, float* c, int64_t ldc, float alpha, float beta) {
  const int64_t body = PairBody(k_dim), half = body / 2;
  VecF even_acc[MR][NR], odd_acc[MR][NR];
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) even_acc[m][j] = odd_acc[m][j] = cpu::VZero();
  }
  const BF16* brow[NR];
#pragma GCC unroll 4
  for (int j = 0; j < NR; ++j) brow[j] = b + (n + j * stride) * k_dim;
  for (int64_t k = 0; k < body; k += kPairStep) {
    const int64_t h = k / 2;
    if (k % kLineValues == 0) {
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) cpu::PrefetchOnce(brow[j] + k, kBf16PrefetchBytes);
    }
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      VecF we, wo;
      cpu::VLoadPairs(brow[j] + k, &we, &wo);
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) {
        even_acc[m][j] = cpu::VFma(cpu::VLoad(pairs + m * body + h), we, even_acc[m][j]);
        odd_acc[m][j] = cpu::VFma(cpu::VLoad(pairs + m * body + half + h), wo, odd_acc[m][j]);
      }
    }
  }
  for (int m = 0; m < MR; ++m) {
    for (int j = 0; j < NR; ++j) {
      float s = cpu::VReduceAdd(cpu::VAdd(even_acc[m][j], odd_acc[m][j]));
      for (int64_t kk = body; kk < k_dim; ++kk) s += a[m * k_dim + kk] * cpu::SLoad(brow[j] + kk);
      float* dst = c + m * ldc + n + j * stride;
      *dst = Finish(s, alpha, beta, dst);
    }
  }
}

// Rows [row_begin, row_end) of c[:MR, :] for a bf16 b [N,K]; pairs from SplitPairs(a).
template <int MR>
void GemvBf16Rows(const float* a, const float* pairs, int64_t k_dim, const BF16* b, float* c,
                  int64_t ldc, float alpha, float beta, int64_t row_begin, int64_t row_end) {
  // Accumulators in registers: 2 * MR * NR of AVX2's 16 (AVX-512's 32), with room for the
  // activations and the widened weights.
  constexpr int kNr = MR == 1 ? 4 : MR == 2 ? 2 : 1;
  // The kNr rows of a block are taken from kNr equal parts of the range, so each thread reads
  // kNr streams of weights at once rather than one. On this repository's Zen 1 test machine two
  // threads reading one stream each got ~18 GB/s from DRAM, four streams each 21-23 GB/s, and
  // a bf16 decode step went 1.24-1.31x faster (benchmarks/inference-results.md, session 17).
  const int64_t stride = (row_end - row_begin) / kNr;
  for (int64_t i = 0; i < stride; ++i) {
    GemvBf16Block<MR, kNr>(a, pairs, k_dim, b, row_begin + i, stride, c, ldc, alpha, beta);
  }
  for (int64_t n = row_begin + kNr * stride; n < row_end; ++n) {
    GemvBf16Block<MR, 1>(a, pairs, k_dim, b, n, 1, c, ldc, alpha, beta);
  }
}

// ---- GEMV, b [K,N]: split over K so every task streams whole contiguous rows of b ----
//
// Task t owns rows [k0, k1) and accumulates partial[t] [MR, N] = a[:, k0:k1] * b[k0:k1, :] in a
// buffer that stays in L2; the partials are summed at the end. Splitting over N instead would
// read short strided pieces of every row (a new page per row), which defeats the prefetchers.

template <typename W, int MR>
void GemvNoTransRows(const float* a, int64_t k_dim, const W* b, int64_t n_dim, int64_t k0,
                     int64_t k1, float* acc) {
  std::fill(acc, acc + MR * n_dim, 0.0f);
  constexpr int kRows = 4;  // rows of b per pass: one accumulator round trip per 4 rows
  int64_t k = k0;
  for (; k + kRows <= k1; k += kRows) {
    const W* br[kRows];
    VecF av[MR][kRows];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) br[r] = b + (k + r) * n_dim;
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) av[m][r] = cpu::VSet1(a[m * k_dim + k + r]);
    }
    int64_t n = 0;
    for (; n + kLanes <= n_dim; n += kLanes) {
      VecF bv[kRows];
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) bv[r] = cpu::VLoad(br[r] + n);
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) {
        VecF s = cpu::VLoad(acc + m * n_dim + n);
#pragma GCC unroll 4
        for (int r = 0; r < kRows; ++r) s = cpu::VFma(av[m][r], bv[r], s);
        cpu::VStore(acc + m * n_dim + n, s);
      }
    }
    for (; n < n_dim; ++n) {
      for (int m = 0; m < MR; ++m) {
        float s = acc[m * n_dim + n];
        for (int r = 0; r < kRows; ++r) s += a[m * k_dim + k + r] * cpu::SLoad(br[r] + n);
        acc[m * n_dim + n] = s;
      }
    }
  }
  for (; k < k1; ++k) {
    const W* brow = b + k * n_dim;
    for (int m = 0; m < MR; ++m) {
      const float av = a[m * k_dim + k];
      float* row = acc + m * n_dim;
      for (int64_t n = 0; n < n_dim; ++n) row[n] += av * cpu::SLoad(brow + n);
    }
  }
}

// Runs body.template operator()<MR>() for MR = rows in [1, 4].
template <typename Body>
void DispatchRows(int64_t rows, Body&& body) {
  switch (rows) {
    case 1:
      body.template operator()<1>();
      return;
    case 2:
      body.template operator()<2>();
      return;
    case 3:
      body.template operator()<3>();
      return;
    case 4:
      body.template operator()<4>();
      return;
    default:
      SY_CHECK(false) << "GEMV row block of " << rows;
  }
}

// Runs body(lo, hi) over [0, n), which every pool thread claims in ranges from one counter, as
// OpenMP's guided schedule does: each claim takes 1/threads of what is left, and at least
// `grain` items. ParallelFor gives each thread one fixed share, so the caller, done with its
// share, waits for a worker that woke late to finish the other; a decode step runs hundreds of
// short GEMVs, and that wake-up latency would be paid in each. Here whoever is running takes the
// next range, and a late worker finds less (or nothing) left. The first claims are long, so a
// thread's weight streams run long before they jump (the hardware prefetchers ramp up once per
// stream), and the last ones are short, so the threads end together. On this repository's Zen 1
// test machine, against fixed 64 KiB claims: a 32 MiB bf16 GEMV 1.10-1.15x faster, decode
// 1.06-1.08x (bf16), 1.09-1.11x (q8_0) and 1.08-1.17x (q4_0)
// (benchmarks/inference-results.md, session 18).
template <typename Body>
void ClaimRanges(ThreadPool& pool, int64_t n, int64_t grain, const Body& body) {
  const int64_t ranges = (n + grain - 1) / grain;
  const int64_t threads = std::min<int64_t>(pool.num_threads(), ranges);
  if (threads <= 1) {
    body(0, n);
    return;
  }
  std::atomic<int64_t> next{0};
  pool.ParallelFor(threads, 1, [&](int64_t, int64_t) {
    int64_t lo = next.load(std::memory_order_relaxed);
    while (lo < n) {
      const int64_t hi = std::min(n, lo + std::max(grain, (n - lo) / threads));
      // On failure lo is reloaded with the counter's current value.
      if (next.compare_exchange_weak(lo, hi, std::memory_order_relaxed)) {
        body(lo, hi);
        lo = next.load(std::memory_order_relaxed);
      }
    }
  });
}

// The groups' activations rounded to 8 bits (cpu_quant.h) for the integer kernels, once per
// operator on the calling thread; groups that share an `a` (GroupedGemmShared's gate and up)
// share its rounding. The result lives in thread-local scratch until the next call.
std::span<const cpu::Int8Activations> QuantizeGroupActivations(std::span<const GemmArgs> groups) {
  static thread_local std::vector<int8_t> q_storage;
  static thread_local std::vector<float> d_storage;
  static thread_local std::vector<int16_t> offset_storage;
  static thread_local std::vector<cpu::Int8Activations> views;
  size_t values = 0;
  for (const GemmArgs& g : groups) values += static_cast<size_t>(g.m * g.k);
  int8_t* q = ThreadScratch(q_storage, values);
  float* d = ThreadScratch(d_storage, values / 32 * 6);  // d, then sums, then d4
  float* sums = d + values / 32;
  float* d4 = sums + values / 32;
  int16_t* offsets = ThreadScratch(offset_storage, values / 4 + values / 16);  // then sums16
  int16_t* sums16 = offsets + values / 4;
  views.clear();
  for (size_t i = 0; i < groups.size(); ++i) {
    const GemmArgs& g = groups[i];
    size_t same = 0;
    while (same < i && !(groups[same].a == g.a && groups[same].m == g.m)) ++same;
    if (same < i) {
      const cpu::Int8Activations shared = views[same];
      views.push_back(shared);
      continue;
    }
    cpu::QuantizeActivations(g.a, g.m, g.k, q, d, d4, offsets, sums, sums16);
    views.push_back({q, d, d4, offsets, sums, sums16});
    q += g.m * g.k;
    d += g.m * g.k / 32;
    sums += g.m * g.k / 32;
    d4 += g.m * g.k / 8;
    offsets += g.m * g.k / 4;
    sums16 += g.m * g.k / 16;
  }
  return views;
}

// GEMVs with b [N,K] (trans_b, a row-major [M,K], M <= GemvMaxRows) of one or more groups, all of
// the same N, K and dtype: the blocks of kTransBNr rows of every group form one index space,
// claimed in ranges of at least 64 KiB of weights.
void GemvTransB(ThreadPool& pool, std::span<const GemmArgs> groups) {
  if (groups.empty()) return;
  const int64_t n = groups[0].n, k = groups[0].k;
  const int64_t blocks = (n + kTransBNr - 1) / kTransBNr;
  const DType dtype = groups[0].b_dtype;
  for (const GemmArgs& g : groups) {
    SY_CHECK(g.n == n && g.k == k && g.m <= GemvMaxRows(dtype, true) && g.trans_b && !g.trans_a)
        << "GemvTransB: groups differ in shape";
    SY_CHECK(g.b_dtype == dtype) << "GemvTransB: groups differ in dtype";
  }
  std::span<const cpu::Int8Activations> int8_a;
  if (IsQuantized(dtype)) int8_a = QuantizeGroupActivations(groups);
  const auto block_bytes = static_cast<int64_t>(DTypeBytes(dtype, k) * kTransBNr);
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, block_bytes));
  const auto count = static_cast<int64_t>(groups.size());
  // bf16: every group's activation rows split into pairs once, before the threads start.
  static thread_local std::vector<float> pairs_storage;
  static thread_local std::vector<int64_t> pairs_offset;
  pairs_offset.assign(groups.size(), 0);
  int64_t pairs_total = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    pairs_offset[i] = pairs_total;
    pairs_total += groups[i].m * PairBody(k);
  }
  const float* pairs = nullptr;
  if (dtype == DType::kBF16) {
    float* p = ThreadScratch(pairs_storage, static_cast<size_t>(pairs_total));
    for (size_t i = 0; i < groups.size(); ++i) {
      SplitPairs(groups[i].a, groups[i].m, k, p + pairs_offset[i]);
    }
    pairs = p;
  }
  // The thread_locals are the calling thread's: the workers reach them through these pointers.
  const int64_t* offsets = pairs_offset.data();
  const int64_t tile_rows =
      std::max<int64_t>(1, kGemvTileBytes / static_cast<int64_t>(DTypeBytes(dtype, k)));
  ClaimRanges(pool, count * blocks, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo / blocks; i < count && i * blocks < hi; ++i) {
      const GemmArgs& g = groups[static_cast<size_t>(i)];
      const int64_t begin = std::max(lo, i * blocks) - i * blocks;
      const int64_t end = std::min(hi, (i + 1) * blocks) - i * blocks;
      const int64_t row_begin = begin * kTransBNr, row_end = std::min(n, end * kTransBNr);
      if (IsQuantized(dtype) || dtype == DType::kBF16) {
        // Up to 4 rows of a: the whole range at once (GemvBf16Rows reads it as several streams).
        // More: tiles that stay in L2 while each 4 rows of a meet them.
        const int64_t tile = g.m <= 4 ? row_end - row_begin : tile_rows;
        for (int64_t t0 = row_begin; t0 < row_end; t0 += tile) {
          const int64_t t1 = std::min(row_end, t0 + tile);
          if (IsQuantized(dtype)) {
            cpu::QuantGemvRows(dtype, int8_a[static_cast<size_t>(i)], g.m, k, g.b, g.c, n, g.alpha,
                               g.beta, t0, t1);
            continue;
          }
          for (int64_t m0 = 0; m0 < g.m; m0 += 4) {
            const float* a = g.a + m0 * k;
            const float* group_pairs = pairs + offsets[i] + m0 * PairBody(k);
            float* c = g.c + m0 * n;
            DispatchRows(std::min<int64_t>(4, g.m - m0), [&]<int MR>() {
              GemvBf16Rows<MR>(a, group_pairs, k, static_cast<const BF16*>(g.b), c, n, g.alpha,
                               g.beta, t0, t1);
            });
          }
        }
        continue;
      }
      cpu::DispatchWeight(g.b_dtype, g.b, [&](auto* b) {
        using W = std::remove_cv_t<std::remove_pointer_t<decltype(b)>>;
        DispatchRows(g.m, [&]<int MR>() {
          GemvTransBRange<W, MR>(g.a, n, k, b, g.c, n, g.alpha, g.beta, begin, end);
        });
      });
    }
  });
}

template <typename W>
void Gemv(ThreadPool& pool, const GemmArgs& g, const float* a_rows, const W* b) {
  for (int64_t m0 = 0; m0 < g.m; m0 += kGemvMaxRows) {
    int64_t mr = std::min(kGemvMaxRows, g.m - m0);
    const float* a = a_rows + m0 * g.k;
    float* c = g.c + m0 * g.n;
    if (g.trans_b) {
      GemmArgs rows = g;
      rows.m = mr;
      rows.a = a;
      rows.trans_a = false;
      rows.b = b;
      rows.c = c;
      GemvTransB(pool, std::span<const GemmArgs>(&rows, 1));
    } else {
      static thread_local std::vector<float> partial_storage;
      const int64_t tasks = std::clamp<int64_t>(g.k / 64, 1, pool.num_threads());
      float* partial = ThreadScratch(partial_storage, static_cast<size_t>(tasks * mr * g.n));
      pool.ParallelFor(tasks, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t t = lo; t < hi; ++t) {
          DispatchRows(mr, [&]<int MR>() {
            GemvNoTransRows<W, MR>(a, g.k, b, g.n, g.k * t / tasks, g.k * (t + 1) / tasks,
                                   partial + t * mr * g.n);
          });
        }
      });
      const int64_t count = mr * g.n;
      pool.ParallelFor(count, 16384, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          float s = 0.0f;
          for (int64_t t = 0; t < tasks; ++t) s += partial[t * count + i];
          c[i] = Finish(s, g.alpha, g.beta, c + i);
        }
      });
    }
  }
}

// Widens one contiguous panel of the weight at a time and multiplies it with OpenBLAS.
template <typename W>
void GemmPanels(ThreadPool& pool, const GemmArgs& g, const W* b) {
  static thread_local std::vector<float> panel_storage;
  const int64_t lda = g.trans_a ? g.m : g.k;
  // The panel is p rows of the stored weight: rows of [K,N] (a slice of K) or of [N,K] (of N).
  const int64_t row_len = g.trans_b ? g.k : g.n;
  const int64_t total_rows = g.trans_b ? g.n : g.k;
  const int64_t p_max = std::clamp<int64_t>(kPanelBytes / (4 * std::max<int64_t>(1, row_len)), 16,
                                            std::max<int64_t>(16, total_rows));
  float* panel =
      ThreadScratch(panel_storage, static_cast<size_t>(std::min(p_max, total_rows) * row_len));
  for (int64_t r0 = 0; r0 < total_rows; r0 += p_max) {
    int64_t p = std::min(p_max, total_rows - r0);
    const W* src = b + r0 * row_len;
    pool.ParallelFor(p * row_len, 32768,
                     [&](int64_t lo, int64_t hi) { cpu::WidenRow(src + lo, panel + lo, hi - lo); });
    if (g.trans_b) {
      Sgemm(g.m, p, g.k, g.alpha, g.a, lda, g.trans_a, panel, g.k, true, g.beta, g.c + r0, g.n);
    } else {
      const float* a_cols = g.trans_a ? g.a + r0 * g.m : g.a + r0;
      Sgemm(g.m, g.n, p, g.alpha, a_cols, lda, g.trans_a, panel, g.n, false,
            r0 == 0 ? g.beta : 1.0f, g.c, g.n);
    }
  }
}

// GemmPanels for a quantized b [N,K]: panels of whole rows, dequantized in parallel.
void QuantGemmPanels(ThreadPool& pool, const GemmArgs& g) {
  static thread_local std::vector<float> panel_storage;
  const int64_t lda = g.trans_a ? g.m : g.k;
  const int64_t p_max =
      std::clamp<int64_t>(kPanelBytes / (4 * g.k), 16, std::max<int64_t>(16, g.n));
  float* panel = ThreadScratch(panel_storage, static_cast<size_t>(std::min(p_max, g.n) * g.k));
  for (int64_t r0 = 0; r0 < g.n; r0 += p_max) {
    const int64_t p = std::min(p_max, g.n - r0);
    pool.ParallelFor(p, std::max<int64_t>(1, 32768 / g.k), [&](int64_t lo, int64_t hi) {
      cpu::DequantizeRows(g.b_dtype, g.b, g.k, r0 + lo, r0 + hi, panel + lo * g.k);
    });
    Sgemm(g.m, p, g.k, g.alpha, g.a, lda, g.trans_a, panel, g.k, true, g.beta, g.c + r0, g.n);
  }
}

void GemmImpl(ThreadPool& pool, const GemmArgs& g) {
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {
    cpu::ScaleMatrix(g.c, g.m, g.n, g.n, g.beta);
    return;
  }
  if (g.m <= GemvMaxRows(g.b_dtype, g.trans_b)) {
    // The GEMV kernels read a as [M,K] rows; a transposed a is small here, so copy it.
    static thread_local std::vector<float> a_storage;
    const float* a_rows = g.a;
    if (g.trans_a) {
      float* t = ThreadScratch(a_storage, static_cast<size_t>(g.m * g.k));
      for (int64_t kk = 0; kk < g.k; ++kk) {
        for (int64_t m = 0; m < g.m; ++m) t[m * g.k + kk] = g.a[kk * g.m + m];
      }
      a_rows = t;
    }
    if (IsQuantized(g.b_dtype) || (g.b_dtype == DType::kBF16 && g.trans_b)) {
      GemmArgs rows = g;
      rows.a = a_rows;
      rows.trans_a = false;
      GemvTransB(pool, std::span<const GemmArgs>(&rows, 1));
      return;
    }
    cpu::DispatchWeight(g.b_dtype, g.b, [&](auto* b) { Gemv(pool, g, a_rows, b); });
    return;
  }
  if (IsQuantized(g.b_dtype)) {
    QuantGemmPanels(pool, g);
    return;
  }
  if (g.b_dtype == DType::kF32) {
    Sgemm(g.m, g.n, g.k, g.alpha, g.a, g.trans_a ? g.m : g.k, g.trans_a,
          static_cast<const float*>(g.b), g.trans_b ? g.k : g.n, g.trans_b, g.beta, g.c, g.n);
    return;
  }
  cpu::DispatchWeight(g.b_dtype, g.b, [&](auto* b) { GemmPanels(pool, g, b); });
}

// A GEMM weight: f32, bf16, f16, or quantized as b [N,K] (trans_b) with rows of whole blocks.
void CheckGemmWeight(const Tensor& b, const GemmOptions& options, const char* op) {
  if (!IsQuantized(b.dtype())) {
    cpu::CheckWeightDType(b, op, "b");
    return;
  }
  SY_CHECK(options.trans_b) << op << ": a quantized b " << b.ToString()
                            << " must be [N,K] (trans_b): its blocks run along K";
  SY_CHECK(b.dim(b.rank() - 1) % DTypeBlockSize(b.dtype()) == 0)
      << op << ": b " << b.ToString() << " has rows that are not whole blocks of "
      << DTypeBlockSize(b.dtype());
}

// Reads M, K from a and checks b and c against them. b_dims are b's last two dimensions.
GemmArgs MakeArgs(int64_t a_rows, int64_t a_cols, int64_t b_rows, int64_t b_cols, int64_t c_rows,
                  int64_t c_cols, const GemmOptions& options, const char* op) {
  GemmArgs g;
  g.trans_a = options.trans_a;
  g.trans_b = options.trans_b;
  g.alpha = options.alpha;
  g.beta = options.beta;
  g.m = options.trans_a ? a_cols : a_rows;
  g.k = options.trans_a ? a_rows : a_cols;
  g.n = options.trans_b ? b_rows : b_cols;
  int64_t b_k = options.trans_b ? b_cols : b_rows;
  SY_CHECK_EQ(b_k, g.k) << op << ": inner dimensions of op(a) [" << g.m << ", " << g.k
                        << "] and op(b) [" << b_k << ", " << g.n
                        << "] differ (trans_a=" << options.trans_a
                        << ", trans_b=" << options.trans_b << ")";
  SY_CHECK(c_rows == g.m && c_cols == g.n) << op << ": c is [" << c_rows << ", " << c_cols
                                           << "], expected [" << g.m << ", " << g.n << "]";
  return g;
}

}  // namespace

namespace {

// Rows of op(a) from which a bf16 x bf16 product runs on the bf16 dot products (packing b first)
// rather than on the GEMV kernels with a widened (which read b once, unpacked).
constexpr int64_t kBf16DotMinRows = 16;

// Whether Gemm(a, b) runs on the CPU's bf16 dot products (cpu_bf16_gemm.h).
bool UsesBf16DotProducts(const Tensor& a, const Tensor& b, const GemmOptions& options) {
  if (a.dtype() != DType::kBF16 || b.dtype() != DType::kBF16 || a.rank() != 2) return false;
  const int64_t rows = options.trans_a ? a.dim(1) : a.dim(0);
  return rows >= kBf16DotMinRows && cpu::Bf16DotProducts();
}

}  // namespace

void CpuBackend::Bf16DotGemm(const Tensor& a, const Tensor& b, const Tensor& c,
                             const GemmOptions& options) {
  CheckOperand(a, "Gemm");
  CheckOperand(b, "Gemm");
  CheckOperand(c, "Gemm");
  SY_CHECK(b.rank() == 2 && c.rank() == 2) << "Gemm: a " << a.ToString() << ", b " << b.ToString()
                                           << ", c " << c.ToString() << " must all have rank 2";
  cpu::CheckDType(c, DType::kF32, "Gemm", "c");
  const GemmArgs g =
      MakeArgs(a.dim(0), a.dim(1), b.dim(0), b.dim(1), c.dim(0), c.dim(1), options, "Gemm");
  cpu::Bf16Gemm(pool(), cpu::Bf16GemmArgs{.m = g.m,
                                          .n = g.n,
                                          .k = g.k,
                                          .a = a.data<BF16>(),
                                          .lda = a.dim(1),
                                          .trans_a = options.trans_a,
                                          .b = b.data<BF16>(),
                                          .ldb = b.dim(1),
                                          .trans_b = options.trans_b,
                                          .alpha = options.alpha,
                                          .beta = options.beta,
                                          .c = c.data<float>(),
                                          .ldc = g.n});
}

void CpuBackend::Gemm(const Tensor& a, const Tensor& b, const Tensor& c, GemmOptions options) {
  if (cpu::AnySixteenBit({&c})) {
    // A 16-bit output is computed in f32 and rounded once.
    cpu::Widened w(*this);
    return Gemm(a, b, w.Out(c, options.beta != 0.0f), options);
  }
  if (cpu::AnySixteenBit({&a})) {
    // bf16 x bf16 on the bf16 dot products; any other 16-bit a is read exactly, widened.
    if (UsesBf16DotProducts(a, b, options)) return Bf16DotGemm(a, b, c, options);
    cpu::Widened w(*this);
    return Gemm(w.In(a), b, c, options);
  }
  CheckOperand(a, "Gemm");
  CheckOperand(b, "Gemm");
  CheckOperand(c, "Gemm");
  SY_CHECK(a.rank() == 2 && b.rank() == 2 && c.rank() == 2)
      << "Gemm: a " << a.ToString() << ", b " << b.ToString() << ", c " << c.ToString()
      << " must all have rank 2";
  cpu::CheckDType(a, DType::kF32, "Gemm", "a");
  CheckGemmWeight(b, options, "Gemm");
  cpu::CheckDType(c, DType::kF32, "Gemm", "c");
  GemmArgs g =
      MakeArgs(a.dim(0), a.dim(1), b.dim(0), b.dim(1), c.dim(0), c.dim(1), options, "Gemm");
  g.a = a.data<float>();
  g.b = b.data();
  g.b_dtype = b.dtype();
  g.c = c.data<float>();
  GemmImpl(pool(), g);
}

void CpuBackend::BatchedGemm(const Tensor& a, const Tensor& b, const Tensor& c,
                             GemmOptions options) {
  if (cpu::AnySixteenBit({&a, &c})) {
    cpu::Widened w(*this);
    return BatchedGemm(w.In(a), b, w.Out(c, options.beta != 0.0f), options);
  }
  CheckOperand(a, "BatchedGemm");
  CheckOperand(b, "BatchedGemm");
  CheckOperand(c, "BatchedGemm");
  SY_CHECK(a.rank() == 3 && b.rank() == 3 && c.rank() == 3)
      << "BatchedGemm: a " << a.ToString() << ", b " << b.ToString() << ", c " << c.ToString()
      << " must all have rank 3";
  SY_CHECK(a.dim(0) == b.dim(0) && a.dim(0) == c.dim(0))
      << "BatchedGemm: batch sizes of a " << a.ToString() << ", b " << b.ToString() << ", c "
      << c.ToString() << " differ";
  cpu::CheckDType(a, DType::kF32, "BatchedGemm", "a");
  CheckGemmWeight(b, options, "BatchedGemm");
  cpu::CheckDType(c, DType::kF32, "BatchedGemm", "c");
  GemmArgs g =
      MakeArgs(a.dim(1), a.dim(2), b.dim(1), b.dim(2), c.dim(1), c.dim(2), options, "BatchedGemm");
  const size_t b_stride = DTypeBytes(b.dtype(), b.dim(1) * b.dim(2));
  for (int64_t i = 0; i < a.dim(0); ++i) {
    GemmArgs gi = g;
    gi.a = a.data<float>() + i * a.dim(1) * a.dim(2);
    gi.b = static_cast<const char*>(b.data()) + static_cast<size_t>(i) * b_stride;
    gi.b_dtype = b.dtype();
    gi.c = c.data<float>() + i * c.dim(1) * c.dim(2);
    GemmImpl(pool(), gi);
  }
}

namespace {

// Checks one GroupedGemm's shapes and dtypes and appends its non-empty groups to `groups`;
// `all_gemv` stays true while every group is a GEMV with b [N,K] of at most GemvMaxRows rows.
void AppendGemmGroups(const Tensor& a, const Tensor& b, const Tensor& c,
                      std::span<const int64_t> group_rows, GemmOptions options,
                      std::vector<GemmArgs>& groups, bool& all_gemv) {
  SY_CHECK(!options.trans_a) << "GroupedGemm: trans_a must be false";
  SY_CHECK(a.rank() == 2 && b.rank() == 3 && c.rank() == 2)
      << "GroupedGemm: expected a [R,K], b [G,K,N] or [G,N,K], c [R,N]; got a " << a.ToString()
      << ", b " << b.ToString() << ", c " << c.ToString();
  cpu::CheckDType(a, DType::kF32, "GroupedGemm", "a");
  CheckGemmWeight(b, options, "GroupedGemm");
  cpu::CheckDType(c, DType::kF32, "GroupedGemm", "c");
  SY_CHECK_EQ(static_cast<int64_t>(group_rows.size()), b.dim(0))
      << "GroupedGemm: group_rows has " << group_rows.size() << " entries for b " << b.ToString();
  int64_t total = 0;
  for (int64_t rows : group_rows) {
    SY_CHECK_GE(rows, 0) << "GroupedGemm: negative group row count";
    total += rows;
  }
  SY_CHECK_EQ(total, a.dim(0)) << "GroupedGemm: group_rows sum to " << total << " but a is "
                               << a.ToString();
  GemmArgs g =
      MakeArgs(a.dim(0), a.dim(1), b.dim(1), b.dim(2), c.dim(0), c.dim(1), options, "GroupedGemm");
  const size_t b_stride = DTypeBytes(b.dtype(), b.dim(1) * b.dim(2));
  all_gemv = all_gemv && g.trans_b && g.n > 0 && g.k > 0;
  int64_t row = 0;
  for (size_t gi = 0; gi < group_rows.size(); ++gi) {
    int64_t rows = group_rows[gi];
    if (rows == 0) continue;
    GemmArgs grp = g;
    grp.m = rows;
    grp.a = a.data<float>() + row * g.k;
    grp.b = static_cast<const char*>(b.data()) + gi * b_stride;
    grp.b_dtype = b.dtype();
    grp.c = c.data<float>() + row * g.n;
    groups.push_back(grp);
    all_gemv = all_gemv && rows <= GemvMaxRows(b.dtype(), options.trans_b);
    row += rows;
  }
}

void RunGemmGroups(ThreadPool& pool, std::span<const GemmArgs> groups, bool all_gemv) {
  // A decode step's experts: every group's GEMV in one parallel region.
  if (all_gemv) {
    GemvTransB(pool, groups);
    return;
  }
  for (const GemmArgs& grp : groups) GemmImpl(pool, grp);
}

}  // namespace

void CpuBackend::GroupedGemm(const Tensor& a, const Tensor& b, const Tensor& c,
                             std::span<const int64_t> group_rows, GemmOptions options) {
  if (cpu::AnySixteenBit({&c})) {
    cpu::Widened w(*this);
    return GroupedGemm(a, b, w.Out(c, options.beta != 0.0f), group_rows, options);
  }
  if (a.dtype() == DType::kBF16 && b.dtype() == DType::kBF16 && cpu::Bf16DotProducts()) {
    // Mixed-precision training's experts: each group a Gemm of its own, on the bf16 dot
    // products where it has rows enough (Gemm decides).
    SY_CHECK(!options.trans_a) << "GroupedGemm: trans_a must be false";
    SY_CHECK(a.rank() == 2 && b.rank() == 3 && c.rank() == 2)
        << "GroupedGemm: expected a [R,K], b [G,K,N] or [G,N,K], c [R,N]; got a " << a.ToString()
        << ", b " << b.ToString() << ", c " << c.ToString();
    SY_CHECK_EQ(static_cast<int64_t>(group_rows.size()), b.dim(0))
        << "GroupedGemm: group_rows has " << group_rows.size() << " entries for b " << b.ToString();
    int64_t row = 0;
    for (size_t g = 0; g < group_rows.size(); ++g) {
      SY_CHECK_GE(group_rows[g], 0) << "GroupedGemm: negative group row count";
      const int64_t end = row + group_rows[g];
      SY_CHECK_LE(end, a.dim(0)) << "GroupedGemm: group_rows exceed the rows of " << a.ToString();
      if (end > row) {
        Gemm(a.Slice(row, end), b.Select(static_cast<int64_t>(g)), c.Slice(row, end), options);
      }
      row = end;
    }
    SY_CHECK_EQ(row, a.dim(0)) << "GroupedGemm: group_rows sum to " << row << " but a is "
                               << a.ToString();
    return;
  }
  if (cpu::AnySixteenBit({&a})) {
    cpu::Widened w(*this);
    return GroupedGemm(w.In(a), b, c, group_rows, options);
  }
  CheckOperand(a, "GroupedGemm");
  CheckOperand(b, "GroupedGemm");
  CheckOperand(c, "GroupedGemm");
  std::vector<GemmArgs> groups;
  bool all_gemv = true;
  AppendGemmGroups(a, b, c, group_rows, options, groups, all_gemv);
  RunGemmGroups(pool(), groups, all_gemv);
}

void CpuBackend::GroupedGemmShared(const Tensor& a, std::span<const Tensor> bs,
                                   std::span<const Tensor> cs, std::span<const int64_t> group_rows,
                                   GemmOptions options) {
  bool sixteen_bit = cpu::AnySixteenBit({&a});
  for (const Tensor& c : cs) sixteen_bit = sixteen_bit || cpu::AnySixteenBit({&c});
  if (sixteen_bit) {
    // One GroupedGemm per weight (16-bit outputs, and a 16-bit a on the bf16 dot products or
    // widened, are GroupedGemm's).
    SY_CHECK_EQ(bs.size(), cs.size())
        << "GroupedGemmShared: " << bs.size() << " weights for " << cs.size() << " outputs";
    for (size_t i = 0; i < bs.size(); ++i) GroupedGemm(a, bs[i], cs[i], group_rows, options);
    return;
  }
  CheckOperand(a, "GroupedGemmShared");
  SY_CHECK_EQ(bs.size(), cs.size())
      << "GroupedGemmShared: " << bs.size() << " weights for " << cs.size() << " outputs";
  std::vector<GemmArgs> groups;
  bool all_gemv = true;
  for (size_t i = 0; i < bs.size(); ++i) {
    SY_CHECK(bs[i].shape() == bs[0].shape() && bs[i].dtype() == bs[0].dtype())
        << "GroupedGemmShared: weight " << i << " " << bs[i].ToString() << " differs from "
        << bs[0].ToString();
    CheckOperand(bs[i], "GroupedGemmShared");
    CheckOperand(cs[i], "GroupedGemmShared");
    AppendGemmGroups(a, bs[i], cs[i], group_rows, options, groups, all_gemv);
  }
  RunGemmGroups(pool(), groups, all_gemv);
}

void CpuBackend::GroupedGemmWeightGrad(const Tensor& x, const Tensor& dy, const Tensor& dw,
                                       std::span<const int64_t> group_rows, float beta) {
  if (x.dtype() == DType::kBF16 && dy.dtype() == DType::kBF16 && cpu::Bf16DotProducts()) {
    // dw_g [N,K] = dy_g^T x_g + beta dw_g: a Gemm per group (an empty one scales by beta).
    SY_CHECK(x.rank() == 2 && dy.rank() == 2 && dw.rank() == 3 &&
             dw.dim(0) == static_cast<int64_t>(group_rows.size()))
        << "GroupedGemmWeightGrad: expected x [R,K], dy [R,N], dw [G,N,K] with G = "
        << group_rows.size() << "; got x " << x.ToString() << ", dy " << dy.ToString() << ", dw "
        << dw.ToString();
    int64_t row = 0;
    for (size_t g = 0; g < group_rows.size(); ++g) {
      SY_CHECK_GE(group_rows[g], 0) << "GroupedGemmWeightGrad: negative group row count";
      const int64_t end = row + group_rows[g];
      SY_CHECK_LE(end, x.dim(0)) << "GroupedGemmWeightGrad: group_rows exceed the rows of "
                                 << x.ToString();
      Gemm(dy.Slice(row, end), x.Slice(row, end), dw.Select(static_cast<int64_t>(g)),
           GemmOptions{.trans_a = true, .beta = beta});
      row = end;
    }
    SY_CHECK_EQ(row, x.dim(0)) << "GroupedGemmWeightGrad: group_rows sum to " << row << " but x is "
                               << x.ToString();
    return;
  }
  if (cpu::AnySixteenBit({&x, &dy})) {
    cpu::Widened w(*this);
    return GroupedGemmWeightGrad(w.In(x), w.In(dy), dw, group_rows, beta);
  }
  CheckOperand(x, "GroupedGemmWeightGrad");
  CheckOperand(dy, "GroupedGemmWeightGrad");
  CheckOperand(dw, "GroupedGemmWeightGrad");
  SY_CHECK(x.rank() == 2 && dy.rank() == 2 && dw.rank() == 3)
      << "GroupedGemmWeightGrad: expected x [R,K], dy [R,N], dw [G,N,K]; got x " << x.ToString()
      << ", dy " << dy.ToString() << ", dw " << dw.ToString();
  cpu::CheckDType(x, DType::kF32, "GroupedGemmWeightGrad", "x");
  cpu::CheckDType(dy, DType::kF32, "GroupedGemmWeightGrad", "dy");
  cpu::CheckDType(dw, DType::kF32, "GroupedGemmWeightGrad", "dw");
  const int64_t r = x.dim(0), k = x.dim(1), n = dy.dim(1);
  SY_CHECK_EQ(dy.dim(0), r) << "GroupedGemmWeightGrad: x " << x.ToString() << " and dy "
                            << dy.ToString() << " differ in rows";
  cpu::CheckShape(dw, {static_cast<int64_t>(group_rows.size()), n, k}, "GroupedGemmWeightGrad",
                  "dw");
  int64_t total = 0;
  for (int64_t rows : group_rows) {
    SY_CHECK_GE(rows, 0) << "GroupedGemmWeightGrad: negative group row count";
    total += rows;
  }
  SY_CHECK_EQ(total, r) << "GroupedGemmWeightGrad: group_rows sum to " << total << " but x is "
                        << x.ToString();
  int64_t row = 0;
  for (size_t g = 0; g < group_rows.size(); ++g) {
    int64_t rows = group_rows[g];
    float* dwg = dw.data<float>() + static_cast<int64_t>(g) * n * k;
    // dw_g [N,K] = dy_g^T [N,rows] * x_g [rows,K] + beta * dw_g; rows == 0 scales by beta.
    Sgemm(n, k, rows, 1.0f, dy.data<float>() + row * n, n, /*trans_a=*/true,
          x.data<float>() + row * k, k, /*trans_b=*/false, beta, dwg, k);
    row += rows;
  }
}

}  // namespace sy
