// gtest main for the MPI tests, launched as `mpirun -np N <binary>`. MPI is initialised once for
// the whole binary; only rank 0 prints gtest's normal output, the other ranks print just their
// failures (prefixed with the rank); the exit status is non-zero on every rank when a test failed
// on any rank. The world communicator aborts the job after 60 s instead of hanging when ranks
// disagree (for example after an ASSERT returned early on one rank).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "tests/parallel/mpi_test_env.h"

namespace sy::testing {
namespace {

MpiEnvironment* g_env = nullptr;

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() != nullptr ? result.file_name() : "?", result.line_number(),
                 result.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

}  // namespace

MpiEnvironment& TestMpi() {
  SY_CHECK(g_env != nullptr) << "the MPI test main did not create the environment";
  return *g_env;
}

}  // namespace sy::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  sy::MpiEnvironmentOptions options;
  options.world.timeout = std::chrono::seconds(60);
  options.world.on_timeout = sy::TimeoutAction::kAbortJob;
  sy::Result<std::unique_ptr<sy::MpiEnvironment>> env =
      sy::MpiEnvironment::Create(&argc, &argv, options);
  if (!env.ok()) {
    std::fprintf(stderr, "%s\n", env.status().ToString().c_str());
    return 1;
  }
  sy::testing::g_env = env->get();
  sy::MpiCommunicator& world = (*env)->world();
  const int rank = world.rank();
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new sy::testing::RankFailurePrinter(rank));
  }
  int32_t failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  SY_CHECK_OK(world.AllReduceInPlace<int32_t>(std::span<int32_t>(&failed, 1), sy::Reduction::kMax));
  if (rank == 0 && failed != 0) {
    std::fprintf(stderr, "FAILED on at least one of %d ranks (see the [rank N] lines)\n",
                 world.size());
  }
  sy::testing::g_env = nullptr;
  env->reset();
  return failed;
}
