#include "runtime/opcheck/backend_check.h"

#include <algorithm>
#include <chrono>
#include <map>

namespace sy {

BackendCheckReport CheckBackendOps(Backend& backend,
                                   const std::function<void(const OpCheckResult&)>& on_result) {
  BackendCheckReport report;
  const auto start = std::chrono::steady_clock::now();
  for (const OpCheckCase& c : AllOpChecks()) {
    report.results.push_back(c.run(backend));
    if (!report.results.back().passed) ++report.failed;
    if (on_result) on_result(report.results.back());
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.ops = SummarizeByOp(report.results);
  return report;
}

std::vector<OpCheckSummary> SummarizeByOp(std::span<const OpCheckResult> results) {
  std::vector<OpCheckSummary> ops;
  std::map<std::string, size_t> index;  // op -> its place in `ops`
  for (const OpCheckResult& r : results) {
    auto [it, inserted] = index.emplace(r.op, ops.size());
    if (inserted) ops.push_back(OpCheckSummary{r.op});
    OpCheckSummary& s = ops[it->second];
    ++s.cases;
    if (!r.passed) ++s.failed;
    if (r.threshold > 0) s.worst_ratio = std::max(s.worst_ratio, r.nmse / r.threshold);
  }
  return ops;
}

}  // namespace sy
