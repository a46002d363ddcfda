// `switchyard train --config FILE.json [--set key=value ...] [--resume]`: single-process training
// (launcher/trainer.h). Prints progress, writes metrics and checkpoints as the config says, and
// ends with one line "final step N eval loss L time Ts accuracy: <per-task accuracy>".
#include <cstdio>
#include <string>
#include <vector>

#include "launcher/command.h"
#include "launcher/trainer.h"

namespace sy::launcher {
namespace {

class TrainCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--config", config_path_, "Training config (JSON)")->required();
    app.add_option("--set", overrides_, "Override a config key: --set train.steps=100");
    app.add_flag("--resume", resume_, "Continue from the latest checkpoint in checkpoint.dir");
  }

  int Run() override {
    std::vector<std::string> sets = overrides_;
    if (resume_) sets.push_back("checkpoint.resume=true");
    Result<TrainConfig> config = LoadTrainConfigFile(config_path_, sets);
    if (!config.ok()) {
      PrintError(config.status());
      return 1;
    }
    Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(*config);
    if (!trainer.ok()) {
      PrintError(trainer.status());
      return 1;
    }
    std::printf("model: %lld parameters (%lld in experts) on %s\n",
                static_cast<long long>((*trainer)->model().parameters().num_elements()),
                static_cast<long long>((*trainer)->model().parameters().num_expert_elements()),
                config->train.device.c_str());
    Result<EvalReport> result = (*trainer)->Run(stdout);
    if (!result.ok()) {
      PrintError(result.status());
      return 1;
    }
    return 0;
  }

 private:
  std::string config_path_;
  std::vector<std::string> overrides_;
  bool resume_ = false;
};

SY_REGISTER_COMMAND("train", "Train a model on one process (cpu or sim)", TrainCommand);

}  // namespace
}  // namespace sy::launcher
