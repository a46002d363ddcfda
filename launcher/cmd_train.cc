// `switchyard train --config FILE.json [--set key=value ...] [--resume] [--log-all-ranks]`:
// training in one process or under mpirun
// (`mpirun -np 4 switchyard train --config examples/configs/ep4.json`; several nodes through
// mpirun's --hostfile). The job, its output and how a distributed run ends on an error are
// RunTrainingJob's (launcher/training/training_job.h).
#include <string>
#include <vector>

#include "launcher/command.h"
#include "launcher/training/training_job.h"

namespace sy::launcher {
namespace {

class TrainCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--config", options_.config_path, "Training config (JSON)")->required();
    app.add_option("--set", options_.overrides, "Override a config key: --set train.steps=100");
    app.add_flag("--resume", options_.resume,
                 "Continue from the latest checkpoint in checkpoint.dir");
    app.add_flag("--log-all-ranks", options_.log_all_ranks,
                 "Under mpirun, every rank prints its progress, prefixed [rank r]");
    app.add_option("--threads", threads_,
                   "CPU threads per rank; the same as --set train.threads=N (default: the "
                   "config's, 0 = SY_NUM_THREADS or every core)")
        ->check(CLI::Range(0, 4096).description("an integer from 0 to 4096"));
  }

  int Run() override {
    if (threads_ >= 0) options_.overrides.push_back("train.threads=" + std::to_string(threads_));
    const TrainingJobResult result = RunTrainingJob(options_);
    if (result.status.ok()) return 0;
    if (result.report_error) PrintError(result.status);
    return 1;
  }

 private:
  TrainingJobOptions options_;
  int threads_ = -1;  // -1: the config's train.threads
};

SY_REGISTER_COMMAND("train", "Train a model, in one process or under mpirun (cpu or sim)",
                    TrainCommand);

}  // namespace
}  // namespace sy::launcher
