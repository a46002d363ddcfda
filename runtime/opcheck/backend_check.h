// CheckBackendOps: every op-check case (op_check.h) on one backend, in order, with the verdict per
// operator that `switchyard selftest` prints: how many cases, how many failed, and the worst
// case's error as a fraction of its threshold.
//
// Ownership: results are plain values. Thread-safety: CheckBackendOps uses the backend as an
// operator caller does (one thread at a time per backend); SummarizeByOp is a pure function.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/opcheck/op_check.h"

namespace sy {

struct OpCheckSummary {
  std::string op;
  int cases = 0;
  int failed = 0;
  double worst_ratio = 0;  // the largest nmse / threshold over the op's cases (0 without any)
};

struct BackendCheckReport {
  std::vector<OpCheckResult> results;  // every case, in AllOpChecks() order
  std::vector<OpCheckSummary> ops;     // SummarizeByOp(results)
  int failed = 0;                      // failed cases
  double seconds = 0;                  // wall time of the run
};

// Runs every case of AllOpChecks() on `backend`, calling `on_result` (when set) after each.
BackendCheckReport CheckBackendOps(Backend& backend,
                                   const std::function<void(const OpCheckResult&)>& on_result = {});

// One summary per operator, in the order the operators first appear in `results`.
std::vector<OpCheckSummary> SummarizeByOp(std::span<const OpCheckResult> results);

}  // namespace sy
