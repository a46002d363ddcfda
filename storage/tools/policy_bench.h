// Cache policy benchmark (`switchyard bench cache`): hit rates of MoESys LFU, LRU and W-TinyLFU
// against Belady's optimum on expert access traces, at cache sizes given as fractions of all
// experts (layers x experts).
//
// Traces are files in the format of storage/cache/access_trace.h (routing traces recorded from a
// model) or synthetic Zipf traces (GenerateZipfTrace). The first `warmup_fraction` of each
// trace's steps fill the cache but are not counted.
//
// Thread-safety: pure functions, but for the files CollectBenchTraces reads and writes.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "storage/cache/access_trace.h"
#include "storage/cache/cache_policy.h"

namespace sy::storage {

struct NamedTrace {
  std::string name;
  AccessTrace trace;
};

struct PolicyBenchOptions {
  // Cache sizes as fractions of layers x experts. Default: 10% .. 50%.
  std::vector<double> fractions = {0.1, 0.2, 0.3, 0.4, 0.5};
  LfuOptions lfu;  // MoESys LFU parameters. Default: LfuOptions{}.
  // Leading fraction of the steps left out of the counts. Default: 0.1.
  double warmup_fraction = 0.1;
};

struct PolicyBenchRow {
  std::string trace;
  double fraction = 0;
  uint64_t capacity = 0;
  uint64_t accesses = 0;
  double lfu = 0;  // hit rates in [0, 1]
  double lru = 0;
  double wtinylfu = 0;
  double belady = 0;
};

// The synthetic traces the recorded benchmark uses: stationary Zipf at s = 0.8 and 1.2, and a
// drifting Zipf (s = 1.0, the ranking rotates every 500 steps). 8 layers x 64 experts, top-2,
// 4 tokens per step, 5000 steps.
Result<std::vector<NamedTrace>> StandardZipfTraces(uint64_t seed = 1);

// The traces of one `switchyard bench cache` run: each trace file in `files` (named by its path)
// and, when `files` is empty or `with_zipf`, StandardZipfTraces(seed), each of those also written
// to `save_dir`/<name>.trace when `save_dir` is not empty. The first read or write error.
Result<std::vector<NamedTrace>> CollectBenchTraces(const std::vector<std::string>& files,
                                                   bool with_zipf, uint64_t seed,
                                                   const std::string& save_dir);

std::vector<PolicyBenchRow> RunPolicyBench(const std::vector<NamedTrace>& traces,
                                           const PolicyBenchOptions& options);

// A Markdown table: hit rates in percent, and LFU's gain over LRU in points.
std::string FormatPolicyBench(const std::vector<PolicyBenchRow>& rows);

}  // namespace sy::storage
