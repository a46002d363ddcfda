// MpiCommunicator and MpiEnvironment under mpirun (any number of ranks >= 2).
#include <gtest/gtest.h>

#include <chrono>

#include "parallel/mpi_environment.h"
#include "tests/parallel/collective_checks.h"
#include "tests/parallel/mpi_test_env.h"

namespace sy {
namespace {

using Clock = std::chrono::steady_clock;
using testing::TestMpi;

TEST(MpiCommunicatorTest, World) {
  MpiCommunicator& world = TestMpi().world();
  EXPECT_EQ(world.kind(), "mpi");
  EXPECT_EQ(world.name(), "world");
  EXPECT_TRUE(world.host_buffers());
  EXPECT_GE(world.size(), 2) << "run the MPI tests with at least 2 ranks";
  EXPECT_TRUE(world.health().ok());
}

TEST(MpiCommunicatorTest, Collectives) { testing::CheckCollectives(TestMpi().world()); }

TEST(MpiCommunicatorTest, SendRecvRing) { testing::CheckSendRecvRing(TestMpi().world()); }

TEST(MpiCommunicatorTest, Split) { testing::CheckSplit(TestMpi().world()); }

TEST(MpiCommunicatorTest, SplitCommunicatorsPassTheChecks) {
  MpiCommunicator& world = TestMpi().world();
  Result<std::unique_ptr<Communicator>> half = world.Split(world.rank() % 2, world.rank());
  ASSERT_TRUE(half.ok()) << half.status().ToString();
  testing::CheckCollectives(**half);
}

TEST(MpiCommunicatorTest, OneMachineHasOneNodeLeader) {
  Result<int> leader = TestMpi().world().NodeLeader();
  ASSERT_TRUE(leader.ok()) << leader.status().ToString();
  EXPECT_EQ(*leader, 0) << "all ranks of this test run on one machine";
}

TEST(MpiCommunicatorTest, DuplicateHasItsOwnOptions) {
  CommunicatorOptions options;
  options.timeout = std::chrono::milliseconds(4321);
  Result<std::unique_ptr<MpiCommunicator>> dup = TestMpi().world().Duplicate("dup", options);
  ASSERT_TRUE(dup.ok()) << dup.status().ToString();
  EXPECT_EQ((*dup)->name(), "dup");
  EXPECT_EQ((*dup)->options().timeout, std::chrono::milliseconds(4321));
  EXPECT_EQ((*dup)->rank(), TestMpi().world().rank());
  testing::CheckSendRecvRing(**dup);
}

// Rank 0 enters a barrier that the other ranks join only after rank 0's timeout: rank 0's call
// fails within the timeout with a message naming the call, the communicator and the timeout.
TEST(MpiTimeoutTest, CollectiveAPeerNeverJoinsFailsWithinTheTimeout) {
  MpiCommunicator& world = TestMpi().world();
  const bool waiter = world.rank() == 0;
  CommunicatorOptions options;  // the late ranks keep the default, generous timeout
  if (waiter) {
    options.timeout = std::chrono::milliseconds(300);
    options.on_timeout = TimeoutAction::kReturnError;
  }
  Result<std::unique_ptr<MpiCommunicator>> dup = world.Duplicate("timeout-test", options);
  ASSERT_TRUE(dup.ok()) << dup.status().ToString();
  if (waiter) {
    const Clock::time_point start = Clock::now();
    Status status = (*dup)->Barrier();
    const auto elapsed = Clock::now() - start;
    EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status.ToString();
    EXPECT_NE(status.message().find("Barrier"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("300 ms"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("timeout-test"), std::string::npos) << status.message();
    EXPECT_GE(elapsed, std::chrono::milliseconds(300));
    EXPECT_LT(elapsed, std::chrono::seconds(5));
    // The timed-out barrier cannot be cancelled, so the communicator refuses further work.
    Status again = (*dup)->Barrier();
    EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition) << again.ToString();
    EXPECT_EQ((*dup)->health().code(), StatusCode::kDeadlineExceeded);
  }
  ASSERT_TRUE(world.Barrier().ok());
  // The others join late, which completes rank 0's abandoned barrier inside MPI.
  if (!waiter) {
    EXPECT_TRUE((*dup)->Barrier().ok());
  }
  ASSERT_TRUE(world.Barrier().ok());
}

// A Recv whose Send never comes is cancelled at the timeout and the communicator stays usable.
TEST(MpiTimeoutTest, RecvWithoutSendIsCancelled) {
  MpiCommunicator& world = TestMpi().world();
  CommunicatorOptions options;
  options.timeout = std::chrono::milliseconds(200);
  options.on_timeout = TimeoutAction::kReturnError;
  Result<std::unique_ptr<MpiCommunicator>> dup = world.Duplicate("recv-timeout", options);
  ASSERT_TRUE(dup.ok()) << dup.status().ToString();
  if (world.rank() == 0) {
    int64_t value = 0;
    const Clock::time_point start = Clock::now();
    Status status = (*dup)->Recv(&value, 1, DType::kI64, 1, 99);
    EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status.ToString();
    EXPECT_NE(status.message().find("Recv"), std::string::npos) << status.message();
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
    EXPECT_TRUE((*dup)->health().ok());
  }
  ASSERT_TRUE(world.Barrier().ok());
  testing::CheckSendRecvRing(**dup);
}

TEST(MpiEnvironmentTest, IsCreatedOncePerProcess) {
  Result<std::unique_ptr<MpiEnvironment>> second = MpiEnvironment::Create(nullptr, nullptr);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("already exists"), std::string::npos);
}

TEST(MpiEnvironmentTest, InstallsTheAbortingFatalHandler) {
  FatalHandler installed = SetFatalHandler(nullptr);
  EXPECT_NE(installed, nullptr) << "MpiEnvironment must replace the default print-and-abort";
  SetFatalHandler(installed);
}

}  // namespace
}  // namespace sy
