// PlotRun: the pictures of a run directory, as `switchyard plot RUN_DIR` draws them. From the
// metrics `switchyard train` writes (log.metrics, JSON lines; docs/training.md):
//   loss            train loss (every logged step) and eval loss (every evaluation)
//   eval_accuracy   exact-match accuracy on held-out inputs per task and over all (evaluations)
//   tokens_per_s    training throughput
//   expert_load     heatmap MoE layer x expert: each expert's share of its layer's token-slots,
//                   summed over the logged steps (the metrics' expert_load)
// and, for every `switchyard bench infer --json` result found in RUN_DIR (*.json), its charts
// (inference/tools/infer_bench_charts.h): tokens/s per policy and the cache hit rates per tier.
// Each chart is written as NAME.png and NAME.svg into the output directory.
//
// Thread-safety: reads and writes files only; one call per output directory at a time.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/status.h"

namespace sy::launcher {

struct PlotRunOptions {
  std::string run_dir;  // required
  std::string out_dir;  // Default: "" = RUN_DIR/plots (created)
  std::string metrics;  // Default: "" = RUN_DIR/metrics.jsonl
};

struct PlotRunResult {
  std::vector<std::string> written;  // the files, PNG and SVG
  std::vector<std::string> notes;    // what was not drawn, and why
};

// NotFound when RUN_DIR has neither metrics nor a bench infer result; InvalidArgument naming the
// line of a metrics line that is not a JSON object (a last line cut short, as a killed run leaves
// it, is skipped with a note); IOError for a file that cannot be written.
Result<PlotRunResult> PlotRun(const PlotRunOptions& options);

}  // namespace sy::launcher
