// The charts of a `switchyard bench infer` result (inference/tools/infer_bench.h): the policies'
// prefill and decode tokens/s side by side, and their expert-cache hit rates per tier (device,
// host). `bench infer --plot DIR` writes them; `switchyard plot` draws them for every bench infer
// JSON (--json) it finds in a run directory.
//
// Thread-safety: pure functions of the JSON.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/status.h"
#include "runtime/plot/chart.h"

namespace sy {

// Whether `json` is a bench infer result (an object with a "policies" array).
bool IsInferBenchJson(const nlohmann::json& json);

// (file stem, chart) pairs: "bench_infer_tokens_per_s" (prefill and decode tokens/s per policy
// that ran), and "cache_hit_rates" (device and host hit rates per policy) when any policy
// reports one. `title_suffix` is appended to the titles (a file name, to tell runs apart).
// InvalidArgument when `json` is not a bench infer result or no policy ran.
Result<std::vector<std::pair<std::string, plot::Chart>>> InferBenchCharts(
    const nlohmann::json& json, const std::string& title_suffix = "");

// `bench infer --plot DIR`: InferBenchCharts written as DIR/STEM.png and DIR/STEM.svg (DIR
// created); returns the files written. IOError naming a file or DIR that cannot be written.
Result<std::vector<std::string>> WriteInferBenchCharts(const nlohmann::json& json,
                                                       const std::string& dir);

}  // namespace sy
