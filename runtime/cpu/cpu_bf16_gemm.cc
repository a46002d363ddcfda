// The bf16 x bf16 -> f32 GEMM on vdpbf16ps (cpu_bf16_gemm.h).
//
// Layout (BLIS's, with pairs along K): vdpbf16ps multiplies the 16 dword lanes of two registers
// as pairs of bf16 values and adds both products to an f32 lane. The micro-kernel keeps a tile of
// kMr x kNr outputs in kMr * kNv registers and, for each pair of k's, loads kNv registers of b
// (16 columns x 2 k's each) and broadcasts one dword of a per row: the pair (a[r][k], a[r][k+1]).
// So both operands are packed with their pairs along K kept together:
//  - b into panels of kNr columns, [pairs][kNr] dwords (PackBPanels): from b [K,N] the rows 2p
//    and 2p+1 interleaved, from b [N,K] (trans_b) 16 x 16 transposes of dwords;
//  - a into panels of kMr rows, cut along K into blocks of kKcPairs pairs (PackAPanels): from
//    a [M,K] each row's pairs as they are (a copy), from a [K,M] (trans_a) the rows 2p and 2p+1
//    interleaved, kMr dwords per pair. The micro-kernel takes either layout (kRowStep, kPairStep).
// An odd K gets a zero as the second value of its last pair, on both sides; rows and columns
// past m and n are zeros in the panels. The last rows of c (m % kMr) run a micro-kernel of
// exactly that many rows, the last columns (n % kNr) the full one with masked stores.
//
// Blocking: the panels are grouped into tiles of at most kMcPanels x kNcPanels panels (96 rows x
// 256 columns), which the pool's threads claim one at a time. A tile runs K in blocks of kKcPairs
// pairs; within a block each panel of b (kKcPairs * kNr * 4 bytes = 32 KiB) stays in L1 while
// the tile's row panels of a pass it, and c is loaded and stored once per K block (alpha * sum + c
// after the first).
//
// Packing runs as one parallel region (groups of kPackPanels panels of both operands, claimed one
// at a time), the tiles as a second. The packed operands are limited to kMaxPackBytes each: larger
// ones are done in chunks of rows of a and columns of b.
//
// On the 2-core AMD EPYC Zen 5 (AVX512-BF16 on a full 512-bit datapath: 2 vdpbf16ps per cycle and
// core, about 1050 GFLOP/s for the two cores), runtime_ops_bench's BM_Bf16Gemm ran the training
// shapes (hidden 512, expert width 1024) at 820-945 GFLOP/s on 2 threads, 3.5-4.2x OpenBLAS
// 0.3.21's sgemm on f32 copies of the same values (BM_Bf16GemmOpenBlasF32: 205-250 GFLOP/s, its
// AVX2 Haswell kernels, as that OpenBLAS does not know Zen 5). The micro-kernel alone, in L1,
// reaches 96% of the peak; packing takes 4-8% of a call. 12 x 32 with K blocks of 256 pairs,
// 14 x 32, 10 x 32, 9 x 48, 8 x 48 and 6 x 64, K blocks of 64 to 256 pairs, tiles of 4 to 16
// panels a side and packing items of 1 to 8 panels all ran within a few percent of each other,
// about the noise of that shared machine.
#include "runtime/cpu/cpu_bf16_gemm.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <new>
#include <utility>

#include "runtime/core/check.h"
#include "runtime/core/env.h"
#include "runtime/cpu/cpu_op_util.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SY_BF16_GEMM_X86 1
#include <immintrin.h>
#else
#define SY_BF16_GEMM_X86 0
#endif

namespace sy::cpu {
namespace {

std::atomic<bool> g_forced_off{false};

bool CpuHasBf16Dot() {
#if SY_BF16_GEMM_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

bool DefaultBf16Dot() {
  static const bool value = CpuHasBf16Dot() && EnvInt("SY_CPU_BF16_DOT", 1) != 0;
  return value;
}

}  // namespace

bool Bf16DotProducts() { return !g_forced_off.load(std::memory_order_relaxed) && DefaultBf16Dot(); }

void SetBf16DotProductsForTesting(bool enabled) {
  g_forced_off.store(!enabled, std::memory_order_relaxed);
}

#if SY_BF16_GEMM_X86

namespace {

// Every function that touches an AVX-512 register carries this, so the file builds for any
// baseline; they run only behind Bf16DotProducts().
#define SY_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// Rows and columns of the micro-kernel's tile: kMr * kNv accumulators, kNv registers of b and
// one broadcast of a, of the 32 zmm registers.
constexpr int kMr = 12;
constexpr int kNv = 2;
constexpr int kNr = 16 * kNv;
// Pairs of k per K block: a K block of a panel of b is kKcPairs * kNr dwords, 32 KiB.
constexpr int64_t kKcPairs = 256;
// Panels of a tile, the unit of work of a thread, along M and along N (at most).
constexpr int64_t kMcPanels = 8;
constexpr int64_t kNcPanels = 8;
// Panels per item of the packing region.
constexpr int64_t kPackPanels = 4;
// The most bytes of packed a (and of packed b) at once; larger operands go in chunks.
constexpr int64_t kMaxPackBytes = int64_t{8} << 20;

static_assert(kMr <= 16, "PackAPanels packs one pair of a panel's rows in one register");

// A buffer of 32-bit words, 64-byte aligned, that only grows.
class AlignedScratch {
 public:
  uint32_t* Get(int64_t words) {
    if (words > capacity_) {
      data_.reset(static_cast<uint32_t*>(
          ::operator new (static_cast<size_t>(words) * 4, std::align_val_t{64})));
      capacity_ = words;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(uint32_t* p) const { ::operator delete (p, std::align_val_t{64}); }
  };
  std::unique_ptr<uint32_t, Free> data_;
  int64_t capacity_ = 0;
};

// The calling thread's packed operands.
struct PackScratch {
  AlignedScratch a, b;
};

PackScratch& ThreadPackScratch() {
  thread_local PackScratch scratch;
  return scratch;
}

// Runs fn(i) for i in [0, items) on the pool's threads, each claiming the next item.
template <typename Fn>
void ForEachClaimed(ThreadPool& pool, int64_t items, const Fn& fn) {
  if (items <= 0) return;
  if (items == 1 || pool.num_threads() == 1) {
    for (int64_t i = 0; i < items; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  pool.ParallelFor(std::min<int64_t>(pool.num_threads(), items), 1, [&](int64_t, int64_t) {
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < items;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      fn(i);
    }
  });
}

inline const uint16_t* Bits(const BF16* p) { return reinterpret_cast<const uint16_t*>(p); }

// The low `n` bits set, n in [0, 32].
inline uint32_t LowBits32(int64_t n) {
  return n >= 32 ? ~uint32_t{0} : (uint32_t{1} << std::max<int64_t>(n, 0)) - 1;
}

SY_BF16_TARGET inline __m512bh AsPairs(__m512i v) { return (__m512bh)v; }

// 16 dwords, each the bf16 lo[i] in its low half and hi[i] in its high half; lo and hi hold
// `valid` values (the rest read as zero), hi may be null (zeros).
SY_BF16_TARGET inline __m512i InterleaveHalves(const uint16_t* lo, const uint16_t* hi, int valid) {
  const __mmask16 mask = static_cast<__mmask16>(LowBits32(valid));
  __m512i w = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_maskz_loadu_epi16(mask, lo));
  if (hi != nullptr) {
    __m512i h = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_maskz_loadu_epi16(mask, hi));
    w = _mm512_or_si512(w, _mm512_maskz_slli_epi32(0xffff, h, 16));
  }
  return w;
}

// Transposes the 16 x 16 dwords in r: r[i][j] becomes r[j][i]. The full-mask forms, which compute
// the same as the unmasked ones, because those trip gcc 12's -Wmaybe-uninitialized (cpu_vec.h).
SY_BF16_TARGET inline void Transpose16x16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_epi32(0xffff, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_epi32(0xffff, r[i], r[i + 1]);
  }
  // u[4g + s], per 128-bit lane L: column 4L + s of rows 4g..4g+3.
  for (int g = 0; g < 4; ++g) {
    u[4 * g + 0] = _mm512_maskz_unpacklo_epi64(0xff, t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_maskz_unpackhi_epi64(0xff, t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_maskz_unpacklo_epi64(0xff, t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_maskz_unpackhi_epi64(0xff, t[4 * g + 1], t[4 * g + 3]);
  }
  for (int s = 0; s < 4; ++s) {
    __m512i v0 = _mm512_maskz_shuffle_i32x4(0xffff, u[s], u[4 + s], 0x88);
    __m512i v1 = _mm512_maskz_shuffle_i32x4(0xffff, u[s], u[4 + s], 0xdd);
    __m512i v2 = _mm512_maskz_shuffle_i32x4(0xffff, u[8 + s], u[12 + s], 0x88);
    __m512i v3 = _mm512_maskz_shuffle_i32x4(0xffff, u[8 + s], u[12 + s], 0xdd);
    r[s] = _mm512_maskz_shuffle_i32x4(0xffff, v0, v2, 0x88);
    r[4 + s] = _mm512_maskz_shuffle_i32x4(0xffff, v1, v3, 0x88);
    r[8 + s] = _mm512_maskz_shuffle_i32x4(0xffff, v0, v2, 0xdd);
    r[12 + s] = _mm512_maskz_shuffle_i32x4(0xffff, v1, v3, 0xdd);
  }
}

// The shape of one call (or one chunk of it) and where its packed operands live.
struct Problem {
  int64_t m = 0, n = 0, k = 0;
  int64_t pairs = 0;    // (k + 1) / 2
  int64_t kblocks = 0;  // K blocks of kKcPairs pairs
  const uint16_t* a = nullptr;
  int64_t lda = 0;
  bool trans_a = false;
  const uint16_t* b = nullptr;
  int64_t ldb = 0;
  bool trans_b = false;
  float alpha = 1.0f, beta = 0.0f;
  float* c = nullptr;
  int64_t ldc = 0;
  uint32_t* packed_a = nullptr;  // row panels of a: [panel][kblock][kMr * kKcPairs]
  uint32_t* packed_b = nullptr;  // column panels of b: [panel][pairs][kNr]
};

inline int64_t PanelWordsA(const Problem& p) { return p.kblocks * kMr * kKcPairs; }
inline int64_t PanelWordsB(const Problem& p) { return p.pairs * kNr; }

// Packs row panels [ip0, ip1) of op(a) (rows past m as zeros). Without trans_a a K block of a
// panel is kMr rows of kKcPairs dwords (the pairs of a row as a stores them); with trans_a it is
// kKcPairs groups of kMr dwords (a pair of each row), and the panels advance together along K, so
// that each row of a [K,M] is read as one contiguous run.
SY_BF16_TARGET void PackAPanels(const Problem& p, int64_t ip0, int64_t ip1) {
  for (int64_t kb = 0; kb < p.kblocks; ++kb) {
    const int64_t p0 = kb * kKcPairs, block_pairs = std::min(kKcPairs, p.pairs - p0);
    if (!p.trans_a) {
      // Each row slot has room for kKcPairs pairs (a multiple of 16): whole registers fit.
      const int64_t k0 = 2 * p0, values = std::min(2 * block_pairs, p.k - k0);
      for (int64_t ip = ip0; ip < ip1; ++ip) {
        uint32_t* block = p.packed_a + ip * PanelWordsA(p) + kb * kMr * kKcPairs;
        for (int r = 0; r < kMr; ++r) {
          const int64_t row = ip * kMr + r;
          uint32_t* out = block + r * kKcPairs;
          const uint16_t* src = row < p.m ? p.a + row * p.lda + k0 : nullptr;
          for (int64_t e = 0; e < 2 * block_pairs; e += 32) {
            __m512i v = src != nullptr && e < values
                            ? _mm512_maskz_loadu_epi16(LowBits32(values - e), src + e)
                            : _mm512_setzero_si512();
            _mm512_store_si512(out + e / 2, v);
          }
        }
      }
      continue;
    }
    // Whole 16-dword stores, each overwriting the spill of the one before; the last pair of a
    // block stores only its kMr dwords, so nothing is written past the block.
    for (int64_t q = 0; q < block_pairs; ++q) {
      const int64_t kk = 2 * (p0 + q);
      const uint16_t* lo_row = p.a + kk * p.lda;
      const bool has_hi = kk + 1 < p.k;
      for (int64_t ip = ip0; ip < ip1; ++ip) {
        const int rows = static_cast<int>(std::min<int64_t>(kMr, p.m - ip * kMr));
        const uint16_t* lo = lo_row + ip * kMr;
        __m512i v = InterleaveHalves(lo, has_hi ? lo + p.lda : nullptr, rows);
        uint32_t* out = p.packed_a + ip * PanelWordsA(p) + kb * kMr * kKcPairs + q * kMr;
        if (q + 1 < block_pairs) {
          _mm512_storeu_si512(out, v);
        } else {
          _mm512_mask_storeu_epi32(out, static_cast<__mmask16>(LowBits32(kMr)), v);
        }
      }
    }
  }
}

// Packs column panels [jp0, jp1) of op(b) (columns past n as zeros): for each pair of k's, kNr
// dwords (b[2p][j], b[2p + 1][j]). From b [K,N] the panels advance together along K, so that
// each row of b is read as one contiguous run.
SY_BF16_TARGET void PackBPanels(const Problem& p, int64_t jp0, int64_t jp1) {
  if (!p.trans_b) {
    for (int64_t q = 0; q < p.pairs; ++q) {
      const uint16_t* lo_row = p.b + 2 * q * p.ldb;
      const bool has_hi = 2 * q + 1 < p.k;
      for (int64_t jp = jp0; jp < jp1; ++jp) {
        uint32_t* out = p.packed_b + jp * PanelWordsB(p) + q * kNr;
        for (int v = 0; v < kNv; ++v) {
          const int64_t col = jp * kNr + 16 * v;
          const int valid = static_cast<int>(std::clamp<int64_t>(p.n - col, 0, 16));
          __m512i w = valid > 0 ? InterleaveHalves(lo_row + col,
                                                   has_hi ? lo_row + p.ldb + col : nullptr, valid)
                                : _mm512_setzero_si512();
          _mm512_store_si512(out + 16 * v, w);
        }
      }
    }
    return;
  }
  // b [N,K]: 16 columns are 16 rows of b, 16 pairs 32 values of each; transpose the dwords.
  for (int64_t jp = jp0; jp < jp1; ++jp) {
    uint32_t* dst = p.packed_b + jp * PanelWordsB(p);
    for (int v = 0; v < kNv; ++v) {
      const int64_t col = jp * kNr + 16 * v;
      const int64_t valid = std::clamp<int64_t>(p.n - col, 0, 16);
      for (int64_t q0 = 0; q0 < p.pairs; q0 += 16) {
        const uint32_t mask = LowBits32(p.k - 2 * q0);
        __m512i r[16];
        for (int i = 0; i < 16; ++i) {
          r[i] = i < valid ? _mm512_maskz_loadu_epi16(mask, p.b + (col + i) * p.ldb + 2 * q0)
                           : _mm512_setzero_si512();
        }
        Transpose16x16(r);
        const int64_t count = std::min<int64_t>(16, p.pairs - q0);
        for (int64_t i = 0; i < count; ++i) {
          _mm512_store_si512(dst + (q0 + i) * kNr + 16 * v, r[i]);
        }
      }
    }
  }
}

// c[kRows, cols] = alpha * a_panel . b_panel + beta * c (beta == 0: c not read) over `pairs`
// pairs of k's. Element (r, q) of a's panel is a[q * kPairStep + r * kRowStep]; b's panel is
// [pairs][kNr] dwords, 64-byte aligned. kRows < kMr for the last rows of c only.
template <int kRows, int kRowStep, int kPairStep>
SY_BF16_TARGET void MicroKernel(int64_t pairs, const uint32_t* a, const uint32_t* b, float* c,
                                int64_t ldc, int cols, float alpha, float beta) {
  __m512 acc[kRows][kNv];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t q = 0; q < pairs; ++q) {
    __m512bh bv[kNv];
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) bv[v] = AsPairs(_mm512_load_si512(b + q * kNr + 16 * v));
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      const __m512bh av =
          AsPairs(_mm512_set1_epi32(static_cast<int>(a[q * kPairStep + r * kRowStep])));
#pragma GCC unroll 4
      for (int v = 0; v < kNv; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  __mmask16 masks[kNv];
#pragma GCC unroll 4
  for (int v = 0; v < kNv; ++v) masks[v] = static_cast<__mmask16>(LowBits32(cols - 16 * v));
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
    float* row = c + r * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) {
      if (masks[v] == 0) break;
      __m512 x = _mm512_mul_ps(acc[r][v], va);
      if (beta != 0.0f) x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(masks[v], row + 16 * v), vb, x);
      _mm512_mask_storeu_ps(row + 16 * v, masks[v], x);
    }
  }
}

using MicroKernelFn = void (*)(int64_t pairs, const uint32_t* a, const uint32_t* b, float* c,
                               int64_t ldc, int cols, float alpha, float beta);

// The micro-kernels of one layout of a, indexed by rows - 1.
template <int kRowStep, int kPairStep, int... kRowsLess1>
constexpr std::array<MicroKernelFn, kMr> MicroKernels(std::integer_sequence<int, kRowsLess1...>) {
  return {&MicroKernel<kRowsLess1 + 1, kRowStep, kPairStep>...};
}
constexpr std::array<MicroKernelFn, kMr> kKernelsRowMajorA =
    MicroKernels<kKcPairs, 1>(std::make_integer_sequence<int, kMr>());
constexpr std::array<MicroKernelFn, kMr> kKernelsPairMajorA =
    MicroKernels<1, kMr>(std::make_integer_sequence<int, kMr>());

// The tiles of a chunk: its row panels cut into along_m ranges and its column panels into
// along_n, as evenly as whole panels allow.
struct Tiles {
  int64_t m_panels = 0, n_panels = 0;
  int64_t along_m = 0, along_n = 0;
};

Tiles MakeTiles(const Problem& p, int threads) {
  Tiles tiles;
  tiles.m_panels = (p.m + kMr - 1) / kMr;
  tiles.n_panels = (p.n + kNr - 1) / kNr;
  tiles.along_m = (tiles.m_panels + kMcPanels - 1) / kMcPanels;
  tiles.along_n = (tiles.n_panels + kNcPanels - 1) / kNcPanels;
  // Enough tiles for every thread where the panels allow, cutting the longer side.
  while (tiles.along_m * tiles.along_n < threads &&
         (tiles.along_m < tiles.m_panels || tiles.along_n < tiles.n_panels)) {
    if (tiles.m_panels * tiles.along_n >= tiles.n_panels * tiles.along_m &&
        tiles.along_m < tiles.m_panels) {
      ++tiles.along_m;
    } else if (tiles.along_n < tiles.n_panels) {
      ++tiles.along_n;
    } else {
      ++tiles.along_m;
    }
  }
  return tiles;
}

// Computes tile `t`: its rows and columns of c from the packed operands, K block by K block.
SY_BF16_TARGET void RunTile(const Problem& p, const Tiles& tiles, int64_t t) {
  const int64_t tm = t % tiles.along_m, tn = t / tiles.along_m;
  const int64_t ip0 = tm * tiles.m_panels / tiles.along_m;
  const int64_t ip1 = (tm + 1) * tiles.m_panels / tiles.along_m;
  const int64_t jp0 = tn * tiles.n_panels / tiles.along_n;
  const int64_t jp1 = (tn + 1) * tiles.n_panels / tiles.along_n;
  const std::array<MicroKernelFn, kMr>& kernels =
      p.trans_a ? kKernelsPairMajorA : kKernelsRowMajorA;
  for (int64_t kb = 0; kb < p.kblocks; ++kb) {
    const int64_t p0 = kb * kKcPairs, block_pairs = std::min(kKcPairs, p.pairs - p0);
    const float beta = kb == 0 ? p.beta : 1.0f;
    for (int64_t jp = jp0; jp < jp1; ++jp) {
      const uint32_t* b_panel = p.packed_b + jp * PanelWordsB(p) + p0 * kNr;
      const int cols = static_cast<int>(std::min<int64_t>(kNr, p.n - jp * kNr));
      for (int64_t ip = ip0; ip < ip1; ++ip) {
        const uint32_t* a_panel = p.packed_a + ip * PanelWordsA(p) + kb * kMr * kKcPairs;
        const int64_t rows = std::min<int64_t>(kMr, p.m - ip * kMr);
        kernels[rows - 1](block_pairs, a_panel, b_panel, p.c + ip * kMr * p.ldc + jp * kNr, p.ldc,
                          cols, p.alpha, beta);
      }
    }
  }
}

void Gemm(ThreadPool& pool, const Bf16GemmArgs& args) {
  Problem whole;
  whole.k = args.k;
  whole.pairs = (args.k + 1) / 2;
  whole.kblocks = (whole.pairs + kKcPairs - 1) / kKcPairs;
  whole.lda = args.lda;
  whole.trans_a = args.trans_a;
  whole.ldb = args.ldb;
  whole.trans_b = args.trans_b;
  whole.alpha = args.alpha;
  whole.beta = args.beta;
  whole.ldc = args.ldc;
  // Chunks: whole panels, within kMaxPackBytes (at least one panel).
  const int64_t a_panel_bytes = PanelWordsA(whole) * 4, b_panel_bytes = PanelWordsB(whole) * 4;
  const int64_t m_chunk = std::max<int64_t>(1, kMaxPackBytes / a_panel_bytes) * kMr;
  const int64_t n_chunk = std::max<int64_t>(1, kMaxPackBytes / b_panel_bytes) * kNr;
  PackScratch& scratch = ThreadPackScratch();
  const int64_t m_words = (std::min(args.m, m_chunk) + kMr - 1) / kMr * PanelWordsA(whole);
  const int64_t n_words = (std::min(args.n, n_chunk) + kNr - 1) / kNr * PanelWordsB(whole);
  whole.packed_a = scratch.a.Get(m_words);
  whole.packed_b = scratch.b.Get(n_words);
  const bool b_once = args.n <= n_chunk;
  for (int64_t i0 = 0; i0 < args.m; i0 += m_chunk) {
    for (int64_t j0 = 0; j0 < args.n; j0 += n_chunk) {
      Problem p = whole;
      p.m = std::min(m_chunk, args.m - i0);
      p.n = std::min(n_chunk, args.n - j0);
      p.a = Bits(args.a) + (args.trans_a ? i0 : i0 * args.lda);
      p.b = Bits(args.b) + (args.trans_b ? j0 * args.ldb : j0);
      p.c = args.c + i0 * args.ldc + j0;
      const bool pack_a = j0 == 0, pack_b = !b_once || i0 == 0;
      // Pack items: groups of kPackPanels panels, b's first.
      const int64_t a_panels = pack_a ? (p.m + kMr - 1) / kMr : 0;
      const int64_t b_panels = pack_b ? (p.n + kNr - 1) / kNr : 0;
      const int64_t a_items = (a_panels + kPackPanels - 1) / kPackPanels;
      const int64_t b_items = (b_panels + kPackPanels - 1) / kPackPanels;
      ForEachClaimed(pool, a_items + b_items, [&](int64_t i) {
        if (i < b_items) {
          PackBPanels(p, i * kPackPanels, std::min(b_panels, (i + 1) * kPackPanels));
        } else {
          i -= b_items;
          PackAPanels(p, i * kPackPanels, std::min(a_panels, (i + 1) * kPackPanels));
        }
      });
      const Tiles tiles = MakeTiles(p, pool.num_threads());
      ForEachClaimed(pool, tiles.along_m * tiles.along_n, [&](int64_t t) { RunTile(p, tiles, t); });
    }
  }
}

}  // namespace

void Bf16Gemm(ThreadPool& pool, const Bf16GemmArgs& args) {
  SY_CHECK(Bf16DotProducts()) << "Bf16Gemm needs AVX512-BF16 (ask Bf16DotProducts() first)";
  SY_CHECK(args.m >= 0 && args.n >= 0 && args.k >= 0)
      << "m " << args.m << " n " << args.n << " k " << args.k;
  if (args.m == 0 || args.n == 0) return;
  SY_CHECK(args.c != nullptr);
  SY_CHECK_GE(args.ldc, args.n);
  if (args.k == 0) {
    ScaleMatrix(args.c, args.m, args.n, args.ldc, args.beta);
    return;
  }
  SY_CHECK(args.a != nullptr && args.b != nullptr);
  SY_CHECK_GE(args.lda, args.trans_a ? args.m : args.k);
  SY_CHECK_GE(args.ldb, args.trans_b ? args.k : args.n);
  Gemm(pool, args);
}

#else  // !SY_BF16_GEMM_X86

void Bf16Gemm(ThreadPool& pool, const Bf16GemmArgs& args) {
  SY_CHECK(Bf16DotProducts()) << "Bf16Gemm needs AVX512-BF16, an x86-64 extension";
}

#endif

}  // namespace sy::cpu
