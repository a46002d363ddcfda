#include "runtime/cpu/memory_bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "runtime/core/buffer.h"
#include "runtime/core/check.h"

namespace sy::cpu {
namespace {

// Ranges per thread: enough that a late-starting thread does not leave one range to run alone,
// few enough that each range is a long sequential stream (>= 1 MiB for the arrays used here).
constexpr int64_t kRangesPerThread = 8;

int64_t RangeCount(const ThreadPool& pool, int64_t words) {
  return std::clamp<int64_t>(words / (int64_t{1} << 17), 1, kRangesPerThread * pool.num_threads());
}

uint64_t SumWords(const uint64_t* p, int64_t count) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    s0 += p[i];
    s1 += p[i + 1];
    s2 += p[i + 2];
    s3 += p[i + 3];
  }
  for (; i < count; ++i) s0 += p[i];
  return s0 + s1 + s2 + s3;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

uint64_t StreamRead(ThreadPool& pool, std::span<const uint64_t> words) {
  const int64_t n = static_cast<int64_t>(words.size());
  const int64_t ranges = RangeCount(pool, n);
  std::atomic<uint64_t> total{0};
  pool.ParallelFor(ranges, 1, [&](int64_t lo, int64_t hi) {
    uint64_t sum = 0;
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t begin = n * r / ranges, end = n * (r + 1) / ranges;
      sum += SumWords(words.data() + begin, end - begin);
    }
    total.fetch_add(sum, std::memory_order_relaxed);
  });
  return total.load();
}

void StreamCopy(ThreadPool& pool, std::span<const uint64_t> src, std::span<uint64_t> dst) {
  SY_CHECK_EQ(src.size(), dst.size()) << "StreamCopy: arrays of different sizes";
  const int64_t n = static_cast<int64_t>(src.size());
  const int64_t ranges = RangeCount(pool, n);
  pool.ParallelFor(ranges, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t begin = n * r / ranges, end = n * (r + 1) / ranges;
      std::memcpy(dst.data() + begin, src.data() + begin,
                  static_cast<size_t>(end - begin) * sizeof(uint64_t));
    }
  });
}

MemoryBandwidth MeasureMemoryBandwidth(ThreadPool& pool, int64_t bytes, int repeats) {
  SY_CHECK_GE(bytes, 64) << "MeasureMemoryBandwidth: array too small";
  SY_CHECK_GE(repeats, 1) << "MeasureMemoryBandwidth: repeats";
  const int64_t read_words = bytes / 8, copy_words = bytes / 16;
  // The arrays come from the allocator the weights do (AllocateHostMemory: huge pages where
  // the kernel gives them), so both sides of the ratio walk the same kind of pages.
  auto allocate = [](int64_t words) {
    auto* p = static_cast<uint64_t*>(AllocateHostMemory(static_cast<size_t>(words) * 8));
    SY_CHECK(p != nullptr) << "MeasureMemoryBandwidth: out of memory for " << words * 8 << " bytes";
    return std::unique_ptr<uint64_t[], decltype(&std::free)>(p, &std::free);
  };
  auto read = allocate(read_words);
  auto src = allocate(copy_words);
  auto dst = allocate(copy_words);
  // First touch on the pool, so the pages are mapped before any timed pass.
  pool.ParallelFor(read_words, int64_t{1} << 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) read[i] = static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
  });
  pool.ParallelFor(copy_words, int64_t{1} << 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) src[i] = dst[i] = static_cast<uint64_t>(i);
  });
  const std::span<const uint64_t> read_span(read.get(), static_cast<size_t>(read_words));
  const std::span<const uint64_t> src_span(src.get(), static_cast<size_t>(copy_words));
  const std::span<uint64_t> dst_span(dst.get(), static_cast<size_t>(copy_words));

  MemoryBandwidth bw;
  bw.read_bytes = read_words * 8;
  bw.copy_bytes = copy_words * 8;
  bw.threads = pool.num_threads();
  volatile uint64_t sink = StreamRead(pool, read_span);  // untimed warm-up pass
  StreamCopy(pool, src_span, dst_span);
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    sink = sink + StreamRead(pool, read_span);
    const double read_s = Seconds(start);
    start = std::chrono::steady_clock::now();
    StreamCopy(pool, src_span, dst_span);
    const double copy_s = Seconds(start);
    bw.read_passes.push_back(static_cast<double>(bw.read_bytes) / read_s * 1e-9);
    bw.copy_passes.push_back(static_cast<double>(2 * bw.copy_bytes) / copy_s * 1e-9);
  }
  (void)sink;
  bw.read_gb_per_s = *std::max_element(bw.read_passes.begin(), bw.read_passes.end());
  bw.copy_gb_per_s = *std::max_element(bw.copy_passes.begin(), bw.copy_passes.end());
  return bw;
}

}  // namespace sy::cpu
