// `switchyard train --config FILE.json [--set key=value ...] [--resume] [--log-all-ranks]`:
// training (launcher/training/trainer.h), in one process or under mpirun
// (`mpirun -np 4 switchyard train --config examples/configs/ep4.json`; several nodes through
// mpirun's --hostfile). Rank and world come from MPI; the config's "parallel" block says how the
// ranks split the model (docs/parallel.md). Only rank 0 prints progress, metrics and checkpoints,
// unless --log-all-ranks. Prints progress, writes metrics and checkpoints as the config says, and
// ends with one line "final step N eval loss L time Ts accuracy: <per-task accuracy>".
//
// In a distributed run any error ends the whole job (MpiEnvironment::AbortJob, exit status 1)
// with the message of the rank that saw it, so no rank is left waiting in a collective; a rank
// that dies (SIGKILL) ends the job through mpirun, and a collective that waits longer than
// parallel.timeout_s for a peer aborts it.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "launcher/command.h"
#include "launcher/training/rank_output.h"
#include "launcher/training/trainer.h"
#include "runtime/core/build_info.h"

#if SY_HAVE_MPI
#include "parallel/mpi_environment.h"
#endif

namespace sy::launcher {
namespace {

class TrainCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--config", config_path_, "Training config (JSON)")->required();
    app.add_option("--set", overrides_, "Override a config key: --set train.steps=100");
    app.add_flag("--resume", resume_, "Continue from the latest checkpoint in checkpoint.dir");
    app.add_flag("--log-all-ranks", log_all_ranks_,
                 "Under mpirun, every rank prints its progress, prefixed [rank r]");
  }

  int Run() override {
    std::vector<std::string> sets = overrides_;
    if (resume_) sets.push_back("checkpoint.resume=true");
    Result<TrainConfig> config = LoadTrainConfigFile(config_path_, sets);
    if (!config.ok()) {
      // Every rank reads the same file; one message is enough.
      const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
      if (rank == nullptr || std::string(rank) == "0") PrintError(config.status());
      return 1;
    }
    Communicator* world = nullptr;
    bool concurrent_mpi = false;
#if SY_HAVE_MPI
    std::unique_ptr<MpiEnvironment> mpi;
    if (LaunchedByMpi()) {
      MpiEnvironmentOptions options;
      options.world.timeout =
          std::chrono::milliseconds(static_cast<int64_t>(config->parallel.timeout_s * 1000.0));
      options.world.on_timeout = TimeoutAction::kAbortJob;
      // ZeRO-3 prefetches its all-gathers on its own thread while the expert layers exchange
      // tokens on this one: that overlap needs MPI_THREAD_MULTIPLE, used when MPI provides it.
      options.preferred_thread_level = MpiThreadLevel::kMultiple;
      Result<std::unique_ptr<MpiEnvironment>> env =
          MpiEnvironment::Create(nullptr, nullptr, options);
      if (!env.ok()) {
        PrintError(env.status());
        return 1;
      }
      mpi = std::move(*env);
      world = &mpi->world();
      concurrent_mpi = mpi->thread_level() == MpiThreadLevel::kMultiple;
    }
#endif
    const int rank = world != nullptr ? world->rank() : 0;
    const int size = world != nullptr ? world->size() : 1;
    // A failure on one rank of a job ends all of them; in one process it is an exit status.
    auto fail = [&](const Status& status) {
#if SY_HAVE_MPI
      if (size > 1) MpiEnvironment::AbortJob("error: " + status.message(), 1);
#endif
      PrintError(status);
      return 1;
    };
    Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(*config, world, concurrent_mpi);
    if (!trainer.ok()) return fail(trainer.status());
    RankOutput out(rank, size, log_all_ranks_);
    const ParallelOptions& par = config->parallel;
    std::fprintf(out.file(), "model: %lld parameters (%lld in experts) on %s\n",
                 static_cast<long long>((*trainer)->num_parameters()),
                 static_cast<long long>((*trainer)->num_expert_parameters()),
                 config->train.device.c_str());
    if (size > 1) {
      std::fprintf(out.file(),
                   "parallel: %d ranks, expert parallel %d x data parallel %d, %s all-to-all, "
                   "global batch %lld (%lld per rank)\n",
                   size, par.ep_size, size / par.ep_size,
                   par.hierarchical_a2a ? "hierarchical" : "flat",
                   static_cast<long long>(config->data.batch_size),
                   static_cast<long long>(config->data.batch_size / size));
    }
    if (const std::string sharding = (*trainer)->ShardingReport(); !sharding.empty()) {
      std::fprintf(out.file(), "%s\n", sharding.c_str());
    }
    Result<EvalReport> result = (*trainer)->Run(out.file());
    if (!result.ok()) return fail(result.status());
    return 0;
  }

 private:
  std::string config_path_;
  std::vector<std::string> overrides_;
  bool resume_ = false;
  bool log_all_ranks_ = false;
};

SY_REGISTER_COMMAND("train", "Train a model, in one process or under mpirun (cpu or sim)",
                    TrainCommand);

}  // namespace
}  // namespace sy::launcher
