// `switchyard plot RUN_DIR [--out DIR] [--metrics FILE]`: the pictures of a run as PNG and SVG
// (launcher/run_plots.h says which): loss, per-task accuracy, tokens/s, the expert-load heatmap,
// and the policy and cache-hit-rate charts of any `bench infer --json` result in RUN_DIR.
#include <cstdio>
#include <string>

#include "launcher/command.h"
#include "launcher/run_plots.h"

namespace sy::launcher {
namespace {

class PlotCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("run_dir", options_.run_dir,
                   "Run directory: checkpoint.dir of `switchyard train`, with metrics.jsonl")
        ->required();
    app.add_option("--out", options_.out_dir, "Where the pictures go (default RUN_DIR/plots)");
    app.add_option("--metrics", options_.metrics,
                   "The metrics file, when not RUN_DIR/metrics.jsonl (log.metrics)");
  }

  int Run() override {
    Result<PlotRunResult> result = PlotRun(options_);
    if (!result.ok()) return ExitCode(result.status());
    for (const std::string& note : result->notes) std::printf("note: %s\n", note.c_str());
    for (const std::string& path : result->written) std::printf("wrote %s\n", path.c_str());
    return 0;
  }

 private:
  PlotRunOptions options_;
};

}  // namespace

SY_REGISTER_COMMAND("plot",
                    "Pictures of a run (PNG and SVG): loss, per-task accuracy, tokens/s, expert "
                    "load, bench infer policies and cache hit rates",
                    PlotCommand);

}  // namespace sy::launcher
