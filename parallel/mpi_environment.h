// MpiEnvironment: owns MPI's lifetime in this process (MPI_Init_thread in Create, MPI_Finalize in
// the destructor) and the world communicator.
//
// It installs a fatal handler (sy::SetFatalHandler) that prints "[rank r/n] <check text>" and
// calls MPI_Abort(MPI_COMM_WORLD, kFatalExitCode): an SY_CHECK that fails on one rank ends the
// whole job instead of leaving the other ranks hung in their next collective. The previous
// handler is restored on destruction.
//
// Ownership: at most one MpiEnvironment exists per process, created once (MPI cannot be
// initialised again after MPI_Finalize). If MPI was already initialised by someone else, the
// environment adopts it and leaves finalisation to them. Every communicator must be destroyed
// before the environment.
// Thread-safety: create and destroy on the main thread; world() follows the communicator rules.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "parallel/communicator.h"
#include "parallel/mpi_communicator.h"
#include "runtime/core/status.h"

namespace sy {

enum class MpiThreadLevel : uint8_t {
  kSingle,      // MPI_THREAD_SINGLE
  kFunneled,    // MPI_THREAD_FUNNELED: only the main thread calls MPI
  kSerialized,  // MPI_THREAD_SERIALIZED: any thread, one at a time
  kMultiple,    // MPI_THREAD_MULTIPLE: any thread, concurrently (one thread per communicator)
};

struct MpiEnvironmentOptions {
  // The thread support required; Create fails if MPI provides less. Default: kSerialized.
  MpiThreadLevel thread_level = MpiThreadLevel::kSerialized;
  // The thread support asked of MPI_Init_thread when higher than thread_level: anything from
  // thread_level up is accepted, and thread_level() says what MPI provided. Default: kSingle (ask
  // for thread_level).
  MpiThreadLevel preferred_thread_level = MpiThreadLevel::kSingle;
  // Install the MPI_Abort fatal handler. Default: true.
  bool abort_job_on_fatal = true;
  // Options of world() (timeout and timeout action). Default: CommunicatorOptions{}.
  CommunicatorOptions world;
};

class MpiEnvironment {
 public:
  // The exit status MPI_Abort gives the job when a check fails on any rank.
  static constexpr int kFatalExitCode = 134;

  // Initialises MPI. argc/argv may be null. FailedPrecondition when an environment already exists
  // or MPI was finalized; Unavailable when the requested thread level is not provided.
  static Result<std::unique_ptr<MpiEnvironment>> Create(int* argc, char*** argv,
                                                        const MpiEnvironmentOptions& options = {});
  ~MpiEnvironment();
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;

  // A dup of MPI_COMM_WORLD, named "world".
  MpiCommunicator& world() { return *world_; }
  MpiThreadLevel thread_level() const { return provided_; }

  // Prints "[rank r/n] message" to stderr and ends every rank of the job with `exit_code`.
  // Usable after Create from any thread; falls back to std::abort without MPI.
  [[noreturn]] static void AbortJob(const std::string& message, int exit_code = kFatalExitCode);
  // A line AbortJob prints after its message from now on (the trainer's: the command that
  // resumes the job on the ranks left). Thread-safe; the last note set wins; copied.
  static void SetAbortNote(const std::string& note);

 private:
  MpiEnvironment() = default;

  std::unique_ptr<MpiCommunicator> world_;
  MpiThreadLevel provided_ = MpiThreadLevel::kSingle;
  bool owns_mpi_ = false;
  bool installed_handler_ = false;
  FatalHandler previous_handler_ = nullptr;
};

}  // namespace sy
