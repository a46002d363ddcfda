#include "parallel/local_communicator.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/parallel/collective_checks.h"

namespace sy {
namespace {

TEST(ReductionTest, Names) {
  EXPECT_EQ(ReductionName(Reduction::kSum), "sum");
  EXPECT_EQ(ReductionName(Reduction::kMax), "max");
  EXPECT_EQ(ReductionName(Reduction::kMin), "min");
}

TEST(LocalCommunicatorTest, IsOneRankOnTheHost) {
  LocalCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.kind(), "local");
  EXPECT_TRUE(comm.host_buffers());
  EXPECT_EQ(&comm.host(), &comm);
  Result<int> leader = comm.NodeLeader();
  ASSERT_TRUE(leader.ok());
  EXPECT_EQ(*leader, 0);
}

TEST(LocalCommunicatorTest, CollectivesAreCopies) {
  LocalCommunicator comm;
  testing::CheckCollectives(comm);
}

TEST(LocalCommunicatorTest, SendThenRecvToItself) {
  LocalCommunicator comm;
  testing::CheckSendRecvRing(comm);
}

TEST(LocalCommunicatorTest, RecvWithoutSendFailsInsteadOfHanging) {
  LocalCommunicator comm(CommunicatorOptions{}, "solo");
  int32_t value = 0;
  Status status = comm.Recv(&value, 1, DType::kI32, 0, 3);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("no matching Send"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("solo"), std::string::npos) << status.message();
}

TEST(LocalCommunicatorTest, RecvOfAnotherSizeIsAnError) {
  LocalCommunicator comm;
  std::vector<int32_t> sent = {1, 2, 3};
  ASSERT_TRUE(comm.Send(sent.data(), 3, DType::kI32, 0, 1).ok());
  std::vector<int32_t> got(2);
  Status status = comm.Recv(got.data(), 2, DType::kI32, 0, 1);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("counts must match"), std::string::npos) << status.message();
}

TEST(LocalCommunicatorTest, SplitKeepsOptionsAndOptsOut) {
  CommunicatorOptions options;
  options.timeout = std::chrono::milliseconds(1234);
  LocalCommunicator comm(options);
  testing::CheckSplit(comm);
  Result<std::unique_ptr<Communicator>> sub = comm.Split(5, 0);
  ASSERT_TRUE(sub.ok());
  ASSERT_NE(*sub, nullptr);
  EXPECT_EQ((*sub)->options().timeout, std::chrono::milliseconds(1234));
  EXPECT_EQ((*sub)->name(), "local/split(color=5)");
  Result<std::unique_ptr<Communicator>> none = comm.Split(Communicator::kNoGroup, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
}

using LocalCommunicatorDeathTest = ::testing::Test;

TEST(LocalCommunicatorDeathTest, MisuseFailsACheck) {
  LocalCommunicator comm;
  int64_t x = 0;
  EXPECT_DEATH((void)comm.Broadcast(&x, 1, DType::kI64, 1), "root 1 is not a rank");
  EXPECT_DEATH((void)comm.AllReduce(&x, &x, 1, DType::kU8, Reduction::kSum),
               "reductions take i32, i64, f32 or f64, not u8");
  EXPECT_DEATH((void)comm.ReduceScatter(&x, &x, 1, DType::kBF16, Reduction::kMax),
               "reductions take i32, i64, f32 or f64, not bf16");
  EXPECT_DEATH((void)comm.Send(&x, 1, DType::kI64, 2, 0), "peer 2 is not a rank");
  std::vector<size_t> two = {0, 0};
  std::vector<size_t> one = {0};
  EXPECT_DEATH((void)comm.AllToAllV(&x, two, one, &x, one, one, DType::kU8),
               "send_counts needs one entry per rank");
  EXPECT_DEATH((void)comm.Split(-5, 0), "must be >= 0 or Communicator::kNoGroup");
  std::vector<int32_t> buffer(4);
  std::vector<size_t> count = {3}, displ = {2};
  EXPECT_DEATH((void)comm.AllToAllV<int32_t>(buffer, count, displ, buffer, count, displ),
               "send block of rank 0 \\[2, 5\\) lies outside its 4-element buffer");
}

}  // namespace
}  // namespace sy
