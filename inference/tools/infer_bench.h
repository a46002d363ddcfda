// InferBench: expert policies side by side on one model, one device setting and the
// same prompts (issue "Offloaded inference", "Measurement"; docs/offload.md, "bench infer").
//
// (`switchyard bench infer`; results in benchmarks/offload-results.md.)
//
// For each policy, in turn, on a fresh backend (so its memory peak is its own): load the model
// (resident: every weight on the device; every other policy: the routed experts straight into
// pinned host memory, LoadOptions::experts_on_host, or, with --store, into the SSD/PMem expert
// store behind a host cache of --host-cache-experts experts), install the provider, then R times:
// prefill B random prompts of P tokens (one sequence after another), and decode greedily until
// every sequence has G tokens (G - 1 batched decode steps). Times are medians over the repeats;
// counters are per repeat (totals / R).
//
//   prefill tokens/s  B * P / prefill time
//   decode tokens/s   B * (G - 1) / decode time
//   TTFT              start to the first token of every sequence (= the batch's prefill)
//   stall             time the compute stream waited for expert weights (the provider's counter:
//                     transfers on the critical path), split into prefill and decode
//   H->D bytes        expert bytes moved host -> device
//   device hit rate   the provider's "device_cache_hit_rate" when it reports one; otherwise
//                     1 - (experts fetched = H->D bytes / expert bytes) / experts run, clamped
//   host hit rate     with --store: the host cache's hits / accesses; without: every expert is in
//                     DRAM (null)
//   predictor acc.    the provider's "predictor_accuracy" (null when it has no predictor)
//   peak device mem   the backend's peak bytes in use, the load included
// Every policy's tokens must equal resident's (greedy decoding is deterministic); resident runs
// first as the reference even when not listed (on an unbounded device when it does not fit the
// budget). A mismatch or a failed policy is reported loudly and the exit status is 1.
//
// Thread-safety: RunInferBench creates and drives its own backends; one call at a time.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "inference/expert_policy.h"
#include "runtime/backend/backend.h"
#include "runtime/core/status.h"

namespace sy {

struct InferBenchOptions {
  std::string model_dir;                       // required: a Hugging Face model directory
  std::string policies = "resident,ondemand";  // comma-separated; resident always runs first
  int prompt_len = 16;                         // Default: 16 prompt tokens per sequence
  int gen_len = 16;                            // Default: 16 tokens per sequence
  int batch = 1;                               // Default: 1 sequence
  std::string device = "sim";                  // Default: sim
  SimOptions sim;                              // the sim link and memory
  ExpertPolicyOptions policy_options;          // slots, cache, profile, predictor
  std::string store;                           // "": experts in DRAM; uring:PATH, pmem:PATH ...
  int64_t host_cache_experts = 0;              // with store: host slots; 0 = two layers' worth
  std::string dtype = "bf16";                  // Default: bf16 weights
  // The routed experts' dtype, moved and stored in it by every policy (LoadOptions::expert_dtype:
  // q8_0, q4_0 quantize them on load). "": dtype. Default: ""
  std::string expert_dtype;
  bool pregate = false;  // load as a pre-gated model
  int repeats = 1;       // Default: 1 timed run per policy (medians)
  unsigned seed = 0;     // Default: 0, the random prompts' seed
  int threads = 0;       // Default: 0 = SY_NUM_THREADS or every core
};

struct InferBenchResult {
  std::string table;    // a Markdown table, one row per policy, and any MISMATCH lines
  nlohmann::json json;  // every figure of every policy
  // OK, or Internal when a policy's tokens differ from resident's or a policy failed.
  Status verdict = Status::Ok();
};

// Setup errors (bad options, an unreadable model) are the Result's status; what the policies did
// is in the result, verdict included.
Result<InferBenchResult> RunInferBench(const InferBenchOptions& options);

}  // namespace sy
