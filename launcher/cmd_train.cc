// `switchyard train --config FILE.json [--set key=value ...] [--resume | --resume-from FILE]
// [--log-all-ranks] [--threads N] [--verbose]`: training in one process or under mpirun
// (`mpirun -np 4 switchyard train --config examples/configs/ep4.json`; several nodes through
// mpirun's --hostfile). The job, its output and how a distributed run ends on an error are
// RunTrainingJob's (launcher/training/training_job.h). SIGTERM or SIGINT stops the run after the
// current step with a checkpoint, exit status 0 (launcher/stop_signal.h).
#include <string>
#include <vector>

#include "launcher/command.h"
#include "launcher/stop_signal.h"
#include "launcher/training/training_job.h"
#include "storage/hdf5/hdf5_error_detail.h"

namespace sy::launcher {
namespace {

class TrainCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--config", options_.config_path, "Training config (JSON)")->required();
    app.add_option("--set", options_.overrides, "Override a config key: --set train.steps=100");
    app.add_flag("--resume", options_.resume,
                 "Continue from the newest checkpoint in checkpoint.dir that verifies (a damaged "
                 "newer one is skipped with a warning)");
    app.add_option("--resume-from", options_.resume_from,
                   "Continue from this checkpoint file (a step-*.h5 of this config)");
    app.add_flag("--verbose", verbose_,
                 "With an error from a checkpoint file, HDF5's whole error report too");
    app.add_flag("--wait-for-lock", wait_for_lock_,
                 "When another run holds checkpoint.dir or the expert store, wait for it to end "
                 "(the same as --set train.wait_for_lock=true)");
    app.add_flag("--log-all-ranks", options_.log_all_ranks,
                 "Under mpirun, every rank prints its progress, prefixed [rank r]");
    app.add_option("--threads", threads_,
                   "CPU threads per rank; the same as --set train.threads=N (default: the "
                   "config's, 0 = SY_NUM_THREADS or every core)")
        ->check(IntegerRange(0, 4096));
  }

  int Run() override {
    // SIGTERM or SIGINT: finish the step, write a checkpoint, exit 0; a second one ends it now.
    options_.stop = &InstallStopSignalHandlers();
    SetHdf5VerboseErrors(verbose_);
    if (threads_ >= 0) options_.overrides.push_back("train.threads=" + std::to_string(threads_));
    if (wait_for_lock_) options_.overrides.push_back("train.wait_for_lock=true");
    const TrainingJobResult result = RunTrainingJob(options_);
    if (result.status.ok()) return 0;
    if (result.report_error) PrintError(result.status);
    return 1;
  }

 private:
  TrainingJobOptions options_;
  int threads_ = -1;  // -1: the config's train.threads
  bool verbose_ = false;
  bool wait_for_lock_ = false;
};

SY_REGISTER_COMMAND("train", "Train a model, in one process or under mpirun (cpu or sim)",
                    TrainCommand);

}  // namespace
}  // namespace sy::launcher
