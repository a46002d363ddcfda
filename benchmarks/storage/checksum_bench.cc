// CRC-32C over an expert-sized buffer: Crc32c (three interleaved instruction chains) against one
// chain (internal::Crc32cOneStream) and the table (internal::Crc32cPortable), in one run. Run with
// --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true so the variants
// alternate; the bytes_per_second ratio is the speed-up. Results: benchmarks/storage-results.md.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "storage/store/checksum.h"

namespace {

using CrcFunction = uint32_t (*)(const void*, size_t, uint32_t);

void BM_Crc32c(benchmark::State& state, CrcFunction crc) {
  std::vector<uint8_t> data(static_cast<size_t>(state.range(0)));
  std::mt19937 rng(1);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (auto _ : state) benchmark::DoNotOptimize(crc(data.data(), data.size(), 0));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

BENCHMARK_CAPTURE(BM_Crc32c, three_chains, sy::storage::Crc32c)->Arg(64 << 10)->Arg(4 << 20);
BENCHMARK_CAPTURE(BM_Crc32c, one_chain, sy::storage::internal::Crc32cOneStream)
    ->Arg(64 << 10)
    ->Arg(4 << 20);
BENCHMARK_CAPTURE(BM_Crc32c, table, sy::storage::internal::Crc32cPortable)->Arg(64 << 10);

}  // namespace

BENCHMARK_MAIN();
