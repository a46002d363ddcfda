#include "storage/tools/policy_bench.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "storage/cache/belady.h"
#include "storage/cache/cache_sim.h"

namespace sy::storage {

Result<std::vector<NamedTrace>> StandardZipfTraces(uint64_t seed) {
  struct Spec {
    std::string name;
    double s;
    uint32_t drift_every;
  };
  std::vector<NamedTrace> traces;
  for (const Spec& spec :
       {Spec{"zipf-0.8", 0.8, 0}, Spec{"zipf-1.2", 1.2, 0}, Spec{"zipf-1.0-drift", 1.0, 500}}) {
    ZipfTraceOptions options;
    options.num_layers = 8;
    options.num_experts = 64;
    options.top_k = 2;
    options.tokens_per_step = 4;
    options.steps = 5000;
    options.zipf_s = spec.s;
    options.drift_every = spec.drift_every;
    options.drift_shift = 8;
    options.seed = seed;
    SY_ASSIGN_OR_RETURN(AccessTrace trace, GenerateZipfTrace(options));
    traces.push_back(NamedTrace{spec.name, std::move(trace)});
  }
  return traces;
}

Result<std::vector<NamedTrace>> CollectBenchTraces(const std::vector<std::string>& files,
                                                   bool with_zipf, uint64_t seed,
                                                   const std::string& save_dir) {
  std::vector<NamedTrace> traces;
  for (const std::string& path : files) {
    SY_ASSIGN_OR_RETURN(AccessTrace trace, ReadTraceFile(path));
    traces.push_back(NamedTrace{path, std::move(trace)});
  }
  if (!files.empty() && !with_zipf) return traces;
  SY_ASSIGN_OR_RETURN(std::vector<NamedTrace> zipf, StandardZipfTraces(seed));
  for (NamedTrace& trace : zipf) {
    if (!save_dir.empty()) {
      SY_RETURN_IF_ERROR(WriteTraceFile(save_dir + "/" + trace.name + ".trace", trace.trace));
    }
    traces.push_back(std::move(trace));
  }
  return traces;
}

std::vector<PolicyBenchRow> RunPolicyBench(const std::vector<NamedTrace>& traces,
                                           const PolicyBenchOptions& options) {
  std::vector<PolicyBenchRow> rows;
  for (const NamedTrace& named : traces) {
    const AccessTrace& trace = named.trace;
    auto warmup = static_cast<uint32_t>(trace.num_steps() * options.warmup_fraction);
    for (double fraction : options.fractions) {
      PolicyBenchRow row;
      row.trace = named.name;
      row.fraction = fraction;
      row.capacity = std::max<uint64_t>(
          1, static_cast<uint64_t>(std::llround(fraction * static_cast<double>(trace.num_keys()))));
      auto run = [&](PolicyKind kind) {
        PolicyOptions policy_options;
        policy_options.kind = kind;
        policy_options.lfu = options.lfu;
        std::unique_ptr<CachePolicy> policy = MakeCachePolicy(policy_options, row.capacity);
        return SimulatePolicy(*policy, trace, row.capacity, warmup);
      };
      SimResult lfu = run(PolicyKind::kMoESysLfu);
      row.accesses = lfu.accesses;
      row.lfu = lfu.hit_rate();
      row.lru = run(PolicyKind::kLru).hit_rate();
      row.wtinylfu = run(PolicyKind::kWTinyLfu).hit_rate();
      row.belady = SimulateBelady(trace, row.capacity, warmup).hit_rate();
      rows.push_back(row);
    }
  }
  return rows;
}

std::string FormatPolicyBench(const std::vector<PolicyBenchRow>& rows) {
  std::ostringstream out;
  out << "| trace | cache | slots | MoESys-LFU | LRU | W-TinyLFU | Belady | LFU - LRU |\n";
  out << "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  out << std::fixed << std::setprecision(1);
  for (const PolicyBenchRow& row : rows) {
    out << "| " << row.trace << " | " << row.fraction * 100 << "% | " << row.capacity << " | "
        << row.lfu * 100 << "% | " << row.lru * 100 << "% | " << row.wtinylfu * 100 << "% | "
        << row.belady * 100 << "% | " << std::showpos << (row.lfu - row.lru) * 100 << std::noshowpos
        << " pts |\n";
  }
  return out.str();
}

}  // namespace sy::storage
