// Op-check harness, in the spirit of ggml's test-backend-ops: every operator and every backward of
// runtime/backend/backend.h, on any backend, against the double-precision reference operators
// (runtime/reference/reference_ops.h).
//
// Each case makes seeded random inputs on the host, copies them to the backend's device through
// the Backend interface only (Allocate, CopyAsync on the compute stream, SynchronizeStream), runs
// the operator, copies the outputs back and compares them with the reference by normalised MSE:
//
//   nmse = sum((out - ref)^2) / max(sum(ref^2), 1e-30)
//
// against a threshold stated per case. Outputs the operator must overwrite start as NaN, so an
// element it forgets fails the case. Integer outputs (top-k indices) must match exactly. Inputs
// that a backend stores in bf16/f16 are rounded to that format before the reference sees them, so
// the thresholds stay tight. The same cases run unchanged on cpu, sim and cuda.
//
// RunReferenceGradientChecks closes the chain: central finite differences, in double, of every
// reference forward prove each reference backward (loss L = sum(r * f(x)) with a random r). The
// harness then proves each backend backward equals the reference backward.
//
// Ownership: AllOpChecks() returns a process-lifetime list; results are plain values.
// Thread-safety: AllOpChecks() is safe to call from any thread. A case's run() uses the backend
// as an operator caller does (one thread at a time per backend).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/backend/backend.h"

namespace sy {

struct OpCheckResult {
  std::string op;         // backend operator name, e.g. "GroupedGemm"
  std::string case_name;  // e.g. "bf16_trans_b"; op + "_" + case_name is a valid identifier
  double nmse = 0;        // the worst output's normalised MSE (infinity for an index mismatch)
  double threshold = 0;
  bool passed = false;
  std::string detail;  // which output was worst, and any mismatch
  // The backend lacks what the case needs (BackendCaps; detail says what): passed, not run.
  bool skipped = false;
};

struct OpCheckCase {
  std::string op;
  std::string case_name;
  std::function<OpCheckResult(Backend&)> run;
};

// Every case, in a fixed order. Built once.
const std::vector<OpCheckCase>& AllOpChecks();

struct GradCheckResult {
  std::string op;  // the backward checked, e.g. "AttentionBackward"
  std::string case_name;
  double max_rel_error = 0;  // max |fd - analytic| / max(|analytic|, |fd|) over all entries
  double threshold = 0;
  bool passed = false;
};

// Finite-difference checks of every reference backward against its reference forward.
std::vector<GradCheckResult> RunReferenceGradientChecks();

}  // namespace sy
