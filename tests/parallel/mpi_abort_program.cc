// A deliberately failing MPI job, run by expect_job_abort.sh to prove that one rank's failure
// ends every rank promptly instead of hanging the job. Run with 2 ranks:
//   mpi_abort_program check    rank 1 fails an SY_CHECK while rank 0 waits in a barrier (with a
//                              10-minute timeout, so only the fatal handler can end it)
//   mpi_abort_program timeout  rank 0 enters a barrier with a 1 s timeout (kAbortJob) that rank 1,
//                              asleep, never joins
// Either way the job must exit non-zero within seconds, with the reason on stderr.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "parallel/mpi_environment.h"

int main(int argc, char** argv) {
  const bool timeout_mode = argc > 1 && std::strcmp(argv[1], "timeout") == 0;
  sy::MpiEnvironmentOptions options;
  options.world.timeout = timeout_mode ? std::chrono::seconds(1) : std::chrono::minutes(10);
  options.world.on_timeout = sy::TimeoutAction::kAbortJob;
  sy::Result<std::unique_ptr<sy::MpiEnvironment>> env =
      sy::MpiEnvironment::Create(&argc, &argv, options);
  if (!env.ok()) {
    std::fprintf(stderr, "%s\n", env.status().ToString().c_str());
    return 2;
  }
  sy::MpiCommunicator& world = (*env)->world();
  SY_CHECK_OK(world.Barrier());  // both ranks are up
  if (world.rank() == 1) {
    if (timeout_mode) {
      std::this_thread::sleep_for(std::chrono::seconds(120));
    } else {
      int experts_routed = 3;
      SY_CHECK(experts_routed == 4) << "rank 1 routed " << experts_routed << " experts";
    }
  }
  // Rank 0 waits here; only an abort of the whole job can end it early.
  sy::Status status = world.Barrier();
  std::fprintf(stderr, "rank %d: barrier returned %s (the job should have been aborted)\n",
               world.rank(), status.ToString().c_str());
  return 0;
}
