// DecodeBench: CPU decode tokens/s at batch 1, as achieved memory bandwidth next to the machine's
// bandwidth measured in the same run (`switchyard bench decode`; results in
// benchmarks/inference-results.md).
//
// Loads a Hugging Face MoE model directory (inference/model_loader.h) or a GGUF file
// (inference/gguf_model.h) on the cpu backend, prefills
// a random prompt through the generate engine (inference/generate_engine.h), runs `warmup`
// untimed greedy decode steps, then times `gen_len` greedy decode steps over the KV cache. A
// STREAM-like read and copy (runtime/cpu/memory_bandwidth.h) runs on the backend's own thread
// pool, once before and once after the decode; the fastest pass is the machine's figure
// (STREAM's rule). The medians of the stream passes and of the decode steps are reported too: on
// a shared machine they are the steadier pair, and the steps the hypervisor did not interrupt
// ("steal" in /proc/stat) are reported against the best pass, like against like.
//
// Weight bytes read per decode step are counted exactly from the loaded parameters, in their
// loaded dtype:
//   - every non-expert parameter (attention, norms, routers, shared experts, dense FFNs, lm_head),
//     except the embedding table, of which one row is read (all of it when the LM head is tied);
//   - the weights of each expert the step activated (MoeLayer::plan() after each step: distinct
//     experts, so an expert chosen twice is read once).
// The KV cache bytes the attention reads are reported beside them, not counted as weight bytes.
//
// Thread-safety: RunDecodeBench drives its own backend; one call at a time per process (it
// measures the whole machine).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/dtype.h"
#include "runtime/core/status.h"

namespace sy {

struct DecodeBenchOptions {
  std::string model_dir;       // required
  int prompt_len = 16;         // Default: 16 tokens prefilled first
  int gen_len = 32;            // Default: 32 timed decode steps
  int warmup = 2;              // Default: 2 untimed decode steps before them
  int threads = 0;             // Default: 0 = SY_NUM_THREADS, else every core
  DType dtype = DType::kBF16;  // Default: bf16 weights
  // The routed experts' dtype (LoadOptions::expert_dtype: q8_0 or q4_0 quantize them);
  // unset: a GGUF's quantized experts as stored, else dtype. Default: unset
  std::optional<DType> expert_dtype;
  // A GGUF's quantized dense matrices stay in their blocks (LoadOptions::keep_quantized_matrices).
  // Default: true
  bool keep_quantized_matrices = true;
  int64_t stream_mib = 1024;  // Default: 1 GiB read array (two of half that to copy)
  int stream_repeats = 5;     // Default: 5 timed passes per probe
  unsigned seed = 0;          // Default: 0, the seed of the random prompt
};

// One timed decode step.
struct DecodeStepStats {
  double seconds = 0.0;
  double steal_seconds = 0.0;  // hypervisor steal seen during the step
  int64_t weight_bytes = 0;
  int64_t experts = 0;  // distinct (layer, expert) pairs activated
  int64_t kv_bytes = 0;
};

struct DecodeBenchResult {
  nlohmann::json json;  // every figure (the fields benchmarks/inference/run_decode_bench.sh reads)
  std::string report;   // the same for people, one figure per line
};

Result<DecodeBenchResult> RunDecodeBench(const DecodeBenchOptions& options);

}  // namespace sy
