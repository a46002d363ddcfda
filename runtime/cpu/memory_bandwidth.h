// Memory bandwidth probes: STREAM-like read and copy kernels on a thread pool, and a measurement
// over arrays far larger than the last-level cache. They are the baseline that memory-bound CPU
// kernels (the decode GEMV, `switchyard bench decode`, benchmarks/runtime) are compared with.
//
//   MemoryBandwidth bw = cpu::MeasureMemoryBandwidth(pool, int64_t{1} << 30, 5);
//   // bw.read_gb_per_s: bytes read / s; bw.copy_gb_per_s: (bytes read + written) / s
//
// Each kernel splits its arrays into contiguous ranges (several per pool thread, claimed
// dynamically, as the GEMV's ranges are) so every thread streams long sequential runs.
//
// Ownership: the kernels borrow their arrays; MeasureMemoryBandwidth owns its arrays and frees
// them before it returns. Thread-safety: the kernels may run concurrently on different arrays;
// each blocks until its ParallelFor is done.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/core/thread_pool.h"

namespace sy::cpu {

// Reads every word of `words` once on `pool`; returns their wrapping sum (which keeps the reads
// from being optimised away).
uint64_t StreamRead(ThreadPool& pool, std::span<const uint64_t> words);

// dst = src (same size, checked), with memcpy over each range: glibc uses non-temporal stores
// for ranges this large, so no read-for-ownership traffic is spent on dst.
void StreamCopy(ThreadPool& pool, std::span<const uint64_t> src, std::span<uint64_t> dst);

struct MemoryBandwidth {
  double read_gb_per_s = 0.0;  // bytes read / s, best of the repeats (1 GB = 1e9 bytes)
  double copy_gb_per_s = 0.0;  // (bytes read + bytes written) / s, as STREAM counts Copy
  std::vector<double> read_passes, copy_passes;  // GB/s of each timed pass, in order
  int64_t read_bytes = 0;                        // size of the read array
  int64_t copy_bytes = 0;                        // size of each of the two copy arrays
  int threads = 0;                               // pool.num_threads()
};

// Reads an array of `bytes` and copies between two arrays of `bytes` / 2, `repeats` timed passes
// each (after one untimed pass that touches every page), and keeps the fastest pass, as STREAM
// does. Pick `bytes` several times the last-level cache so the passes measure DRAM.
MemoryBandwidth MeasureMemoryBandwidth(ThreadPool& pool, int64_t bytes, int repeats);

}  // namespace sy::cpu
