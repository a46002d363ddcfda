// How the CPU kernels prefetch weights that a decode step reads once (cpu::PrefetchOnce).
//
// The right cache hint depends on the CPU, and choosing wrong costs a factor of two:
//  - AMD Zen 1 (this repository's first test machine): prefetchnta keeps the streamed weights from
//    evicting the rest of the step from L2 and L3; every alternated bf16/q8_0/q4_0 decode run got
//    faster with it than with no software prefetch (benchmarks/inference-results.md, session 20).
//  - Intel Xeon with AVX-512 (session 23): prefetchnta halves a 2-thread bf16 GEMV streaming from
//    DRAM (11 against 25.6 GB/s without a prefetch), and the ordinary hint (prefetcht0) is the
//    fastest of the three (28.7 GB/s).
// So AMD CPUs take the non-temporal hint and every other the ordinary one, unless the environment
// variable SY_WEIGHT_PREFETCH says nta, t0 or none (for measuring the three side by side).
// Thread-safety: chosen once before main (a constant afterwards); read from any thread.
#pragma once

namespace sy::cpu {

enum class WeightPrefetch { kNonTemporal, kTemporal, kNone };

// The hint in use in this process.
WeightPrefetch ChosenWeightPrefetch();

// "nta", "t0" or "none".
const char* WeightPrefetchName(WeightPrefetch hint);

namespace internal {
// ChosenWeightPrefetch(), as a plain variable for the kernels' inner loops.
extern const WeightPrefetch kWeightPrefetch;
}  // namespace internal

}  // namespace sy::cpu
