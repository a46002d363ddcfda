#include "launcher/training/training_job.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "launcher/training/rank_output.h"
#include "launcher/training/resume_command.h"
#include "launcher/training/trainer.h"
#include "launcher/training/training_loop.h"
#include "runtime/core/build_info.h"

#if SY_HAVE_MPI
#include "parallel/mpi_environment.h"
#endif

namespace sy::launcher {
namespace {

// Rank 0 of an mpirun job, or a single process (MPI not started yet: the launcher's environment).
bool FirstRankByEnvironment() {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  return rank == nullptr || std::string(rank) == "0";
}

// The model's size and, distributed, how the ranks split it.
void PrintLayout(const Trainer& trainer, std::FILE* out) {
  const TrainConfig& config = trainer.config();
  const ParallelOptions& par = config.parallel;
  const int size = trainer.world_size();
  std::fprintf(out, "model: %lld parameters (%lld in experts) on %s\n",
               static_cast<long long>(trainer.num_parameters()),
               static_cast<long long>(trainer.num_expert_parameters()),
               config.train.device.c_str());
  if (size > 1) {
    std::fprintf(out,
                 "parallel: %d ranks, expert parallel %d x data parallel %d, %s all-to-all, "
                 "global batch %lld (%lld per rank)\n",
                 size, par.ep_size, size / par.ep_size,
                 par.hierarchical_a2a ? "hierarchical" : "flat",
                 static_cast<long long>(config.data.batch_size),
                 static_cast<long long>(config.data.batch_size / size));
  }
  if (const std::string sharding = trainer.ShardingReport(); !sharding.empty()) {
    std::fprintf(out, "%s\n", sharding.c_str());
  }
}

// A failure on one rank of a job ends all of them (MpiEnvironment::AbortJob, which does not
// return); in one process it is returned.
Status EndJobOnError(const Status& status, [[maybe_unused]] const Communicator* world) {
#if SY_HAVE_MPI
  if (!status.ok() && world != nullptr && world->size() > 1) {
    MpiEnvironment::AbortJob("error: " + status.message(), 1);
  }
#endif
  return status;
}

// Creates the trainer over `world` (null in one process) and runs it, printing to this rank's
// output. A distributed job ends while the trainer still lives: its destruction could wait on
// peers (ZeRO-3's prefetching thread) that will never come.
Status Train(const TrainConfig& config, Communicator* world, bool concurrent_mpi,
             const TrainingJobOptions& options) {
  Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, world, concurrent_mpi);
  if (!trainer.ok()) return EndJobOnError(trainer.status(), world);
  RankOutput out((*trainer)->rank(), (*trainer)->world_size(), options.log_all_ranks);
  PrintLayout(**trainer, out.file());
  if ((*trainer)->world_size() > 1) {
    // A lost rank ends the job on every rank; this says how to go on with the ones left.
    std::error_code ec;
    std::string binary = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    if (ec) binary = "switchyard";
    const std::string resume = ResumeCommand(config, binary, options.config_path, options.overrides,
                                             (*trainer)->world_size());
    std::fprintf(out.file(), "if a rank is lost, resume on the ranks left with: %s\n",
                 resume.c_str());
#if SY_HAVE_MPI
    MpiEnvironment::SetAbortNote("to resume on the ranks left: " + resume);
#endif
  }
  TrainingLoopOptions loop_options;
  loop_options.stop = options.stop;
  loop_options.on_metrics = options.on_metrics;
  return EndJobOnError(RunTrainingLoop(**trainer, out.file(), loop_options).status(), world);
}

}  // namespace

TrainingJobResult RunTrainingJob(const TrainingJobOptions& options) {
  std::vector<std::string> sets = options.overrides;
  if (options.resume) sets.push_back("checkpoint.resume=true");
  if (!options.resume_from.empty()) sets.push_back("checkpoint.resume_from=" + options.resume_from);
  Result<TrainConfig> config =
      options.config_text.empty()
          ? LoadTrainConfigFile(options.config_path, sets)
          : LoadTrainConfigText(options.config_text, options.config_path, sets);
  // Every rank reads the same file; one message is enough.
  if (!config.ok()) return {config.status(), FirstRankByEnvironment()};
#if SY_HAVE_MPI
  if (LaunchedByMpi()) {
    MpiEnvironmentOptions mpi_options;
    mpi_options.world.timeout =
        std::chrono::milliseconds(static_cast<int64_t>(config->parallel.timeout_s * 1000.0));
    mpi_options.world.on_timeout = TimeoutAction::kAbortJob;
    // ZeRO-3 prefetches its all-gathers on its own thread while the expert layers exchange tokens
    // on this one: that overlap needs MPI_THREAD_MULTIPLE, used when MPI provides it.
    mpi_options.preferred_thread_level = MpiThreadLevel::kMultiple;
    Result<std::unique_ptr<MpiEnvironment>> mpi =
        MpiEnvironment::Create(nullptr, nullptr, mpi_options);
    if (!mpi.ok()) return {mpi.status()};
    const bool concurrent_mpi = (*mpi)->thread_level() == MpiThreadLevel::kMultiple;
    return {Train(*config, &(*mpi)->world(), concurrent_mpi, options)};
  }
#endif
  return {Train(*config, nullptr, false, options)};
}

}  // namespace sy::launcher
