#include "parallel/mpi_environment.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "parallel/mpi_check.h"
#include "parallel/mpi_handles.h"

namespace sy {
namespace {

std::atomic<bool> g_environment_exists{false};
std::atomic<int> g_world_rank{-1};
std::atomic<int> g_world_size{0};
std::atomic<const std::string*> g_abort_note{nullptr};

int ToMpiLevel(MpiThreadLevel level) {
  switch (level) {
    case MpiThreadLevel::kSingle:
      return MPI_THREAD_SINGLE;
    case MpiThreadLevel::kFunneled:
      return MPI_THREAD_FUNNELED;
    case MpiThreadLevel::kSerialized:
      return MPI_THREAD_SERIALIZED;
    case MpiThreadLevel::kMultiple:
      return MPI_THREAD_MULTIPLE;
  }
  return MPI_THREAD_SINGLE;
}

MpiThreadLevel FromMpiLevel(int level) {
  if (level >= MPI_THREAD_MULTIPLE) return MpiThreadLevel::kMultiple;
  if (level >= MPI_THREAD_SERIALIZED) return MpiThreadLevel::kSerialized;
  if (level >= MPI_THREAD_FUNNELED) return MpiThreadLevel::kFunneled;
  return MpiThreadLevel::kSingle;
}

void MpiFatalHandler(const std::string& text) { MpiEnvironment::AbortJob(text); }

}  // namespace

void MpiEnvironment::SetAbortNote(const std::string& note) {
  // Never freed: an abort on another thread may be reading the previous one.
  g_abort_note.store(new std::string(note));
}

void MpiEnvironment::AbortJob(const std::string& message, int exit_code) {
  std::fprintf(stderr, "[switchyard rank %d/%d] %s\n[switchyard rank %d/%d] aborting the MPI job\n",
               g_world_rank.load(), g_world_size.load(), message.c_str(), g_world_rank.load(),
               g_world_size.load());
  if (const std::string* note = g_abort_note.load(); note != nullptr) {
    std::fprintf(stderr, "[switchyard rank %d/%d] %s\n", g_world_rank.load(), g_world_size.load(),
                 note->c_str());
  }
  std::fflush(stderr);
  if (internal::MpiIsLive()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::abort();
}

Result<std::unique_ptr<MpiEnvironment>> MpiEnvironment::Create(
    int* argc, char*** argv, const MpiEnvironmentOptions& options) {
  if (g_environment_exists.exchange(true)) {
    return FailedPreconditionError(
        "MpiEnvironment::Create: an MpiEnvironment already exists in this process; create it once "
        "in main and pass it (or its world communicator) down");
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0) {
    g_environment_exists = false;
    return FailedPreconditionError(
        "MpiEnvironment::Create: MPI was already finalized in this process and cannot be "
        "initialised again; keep one MpiEnvironment alive for the whole program");
  }
  std::unique_ptr<MpiEnvironment> env(new MpiEnvironment());
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (initialized != 0) {
    SY_MPI_CHECK(MPI_Query_thread(&provided));
  } else {
    const MpiThreadLevel asked = std::max(options.thread_level, options.preferred_thread_level);
    SY_MPI_CHECK(MPI_Init_thread(argc, argv, ToMpiLevel(asked), &provided));
    env->owns_mpi_ = true;
  }
  env->provided_ = FromMpiLevel(provided);
  if (provided < ToMpiLevel(options.thread_level)) {
    Status error = UnavailableError(fmt::format(
        "MpiEnvironment::Create: MPI provides thread level {} but thread_level asks for {}; "
        "lower MpiEnvironmentOptions::thread_level or use an MPI built with thread support",
        provided, ToMpiLevel(options.thread_level)));
    return error;  // the destructor finalizes MPI if we initialised it
  }
  int rank = 0;
  int size = 0;
  SY_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  SY_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  g_world_rank = rank;
  g_world_size = size;
  if (options.abort_job_on_fatal) {
    env->previous_handler_ = SetFatalHandler(&MpiFatalHandler);
    env->installed_handler_ = true;
  }
  env->world_ = MpiCommunicator::CreateWorld(options.world);
  return env;
}

MpiEnvironment::~MpiEnvironment() {
  world_.reset();
  if (owns_mpi_ && internal::MpiIsLive()) MPI_Finalize();
  if (installed_handler_) SetFatalHandler(previous_handler_);
  g_environment_exists = false;
}

}  // namespace sy
