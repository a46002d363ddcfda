// The all-to-all plan as a pure function: schedule shapes, the identity copies left out, and the
// errors a config can hit. Execution is covered by thread_group_test.cc and the MPI tests.
#include "parallel/all_to_all.h"

#include <gtest/gtest.h>

#include <sstream>
#include <vector>

#include "parallel/local_communicator.h"
#include "tests/parallel/all_to_all_checks.h"

namespace sy {
namespace {

using Kind = AllToAllStep::Kind;

std::vector<size_t> Ones(int size) { return std::vector<size_t>(size_t(size) * size, 1); }

std::string Describe(const AllToAllPlan& plan) {
  std::ostringstream os;
  for (const AllToAllStep& step : plan.steps()) os << step << "; ";
  return os.str();
}

TEST(AllToAllAlgorithmTest, ParsesConfigValues) {
  Result<AllToAllAlgorithm> flat = ParseAllToAllAlgorithm("flat");
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(*flat, AllToAllAlgorithm::kFlat);
  Result<AllToAllAlgorithm> hier = ParseAllToAllAlgorithm("hierarchical");
  ASSERT_TRUE(hier.ok());
  EXPECT_EQ(*hier, AllToAllAlgorithm::kHierarchical);
  Result<AllToAllAlgorithm> bad = ParseAllToAllAlgorithm("2d");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("\"hierarchical\""), std::string::npos);
  EXPECT_EQ(AllToAllAlgorithmName(AllToAllAlgorithm::kHierarchical), "hierarchical");
}

TEST(AllToAllPlanTest, FlatIsOneWorldExchange) {
  Result<NodeLayout> layout = NodeLayout::Emulated(4, 2);
  ASSERT_TRUE(layout.ok());
  std::vector<size_t> counts = testing::MakeCountMatrix(4, testing::CountPattern::kRandom, 3, 9);
  Result<AllToAllPlan> plan = AllToAllPlan::Build(AllToAllAlgorithm::kFlat, *layout, 1, counts, 8);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->steps().size(), 1u);
  const AllToAllStep& step = plan->steps()[0];
  EXPECT_EQ(step.kind, Kind::kExchange);
  EXPECT_EQ(step.group, AllToAllGroup::kWorld);
  EXPECT_EQ(plan->workspace_bytes(), 0u);
  for (int p = 0; p < 4; ++p) {
    EXPECT_EQ(plan->send_counts()[p], counts[1 * 4 + p]);
    EXPECT_EQ(plan->recv_counts()[p], counts[p * 4 + 1]);
    EXPECT_EQ(step.send_counts[p], counts[1 * 4 + p] * 8) << "exchange counts are in bytes";
  }
}

TEST(AllToAllPlanTest, TwoByTwoNodeMajorNeedsNoFinalRedistribution) {
  Result<NodeLayout> layout = NodeLayout::Emulated(4, 2);
  ASSERT_TRUE(layout.ok());
  Result<AllToAllPlan> plan =
      AllToAllPlan::Build(AllToAllAlgorithm::kHierarchical, *layout, 2, Ones(4), 4);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // pack -> intra-node exchange -> transpose -> inter-node exchange straight into the output.
  ASSERT_EQ(plan->steps().size(), 4u) << Describe(*plan);
  EXPECT_EQ(plan->steps()[0].kind, Kind::kCopy);
  EXPECT_EQ(plan->steps()[1].kind, Kind::kExchange);
  EXPECT_EQ(plan->steps()[1].group, AllToAllGroup::kIntraNode);
  EXPECT_EQ(plan->steps()[2].kind, Kind::kCopy);
  EXPECT_EQ(plan->steps()[3].kind, Kind::kExchange);
  EXPECT_EQ(plan->steps()[3].group, AllToAllGroup::kInterNode);
  EXPECT_EQ(plan->steps()[0].src, AllToAllBuffer::kInput);
  EXPECT_EQ(plan->steps()[3].dst, AllToAllBuffer::kOutput);
  // Each rank moves 4 elements of 4 bytes; the intermediates hold 16 bytes each.
  EXPECT_EQ(plan->work1_offset(), 256u);
  EXPECT_EQ(plan->workspace_bytes(), 256u + 16u);
  // Stage 1 sends each local peer its two blocks (one per node); stage 2 one per node pair.
  EXPECT_EQ(plan->steps()[1].send_counts, (std::vector<size_t>{8, 8}));
  EXPECT_EQ(plan->steps()[3].send_counts, (std::vector<size_t>{8, 8}));
}

TEST(AllToAllPlanTest, OneNodeIsJustTheIntraNodeExchange) {
  Result<NodeLayout> layout = NodeLayout::Emulated(4, 4);
  ASSERT_TRUE(layout.ok());
  Result<AllToAllPlan> plan =
      AllToAllPlan::Build(AllToAllAlgorithm::kHierarchical, *layout, 0, Ones(4), 4);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->steps().size(), 1u) << Describe(*plan);
  EXPECT_EQ(plan->steps()[0].group, AllToAllGroup::kIntraNode);
  EXPECT_EQ(plan->workspace_bytes(), 0u);
}

TEST(AllToAllPlanTest, OneRankPerNodeIsJustTheInterNodeExchange) {
  Result<NodeLayout> layout = NodeLayout::Emulated(4, 1);
  ASSERT_TRUE(layout.ok());
  Result<AllToAllPlan> plan =
      AllToAllPlan::Build(AllToAllAlgorithm::kHierarchical, *layout, 3, Ones(4), 4);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->steps().size(), 1u) << Describe(*plan);
  EXPECT_EQ(plan->steps()[0].group, AllToAllGroup::kInterNode);
}

TEST(AllToAllPlanTest, RoundRobinRanksNeedTheFinalRedistribution) {
  // Ranks 0 and 2 on machine 0, ranks 1 and 3 on machine 1 (mpirun --map-by node). Packing by
  // destination local rank is then the identity, but the output needs the stage-3 copy.
  NodeLayout layout = NodeLayout::FromNodeKeys(std::vector<int>{0, 1, 0, 1});
  EXPECT_FALSE(layout.contiguous());
  Result<AllToAllPlan> plan =
      AllToAllPlan::Build(AllToAllAlgorithm::kHierarchical, layout, 1, Ones(4), 4);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->steps().size(), 4u) << Describe(*plan);
  EXPECT_EQ(plan->steps()[0].kind, Kind::kExchange);
  EXPECT_EQ(plan->steps()[0].group, AllToAllGroup::kIntraNode);
  EXPECT_EQ(plan->steps()[0].src, AllToAllBuffer::kInput);
  EXPECT_EQ(plan->steps()[3].kind, Kind::kCopy);
  EXPECT_EQ(plan->steps()[3].dst, AllToAllBuffer::kOutput);
}

TEST(AllToAllPlanTest, ScrambledRanksUseAllFiveSteps) {
  // Machine of each rank: 1, 0, 0, 1, so neither packing nor the final order is an identity.
  NodeLayout layout = NodeLayout::FromNodeKeys(std::vector<int>{1, 0, 0, 1});
  Result<AllToAllPlan> plan =
      AllToAllPlan::Build(AllToAllAlgorithm::kHierarchical, layout, 2, Ones(4), 4);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->steps().size(), 5u) << Describe(*plan);
}

TEST(AllToAllPlanTest, SingleRankCopiesInputToOutput) {
  Result<NodeLayout> layout = NodeLayout::Emulated(1, 1);
  ASSERT_TRUE(layout.ok());
  std::vector<size_t> counts = {5};
  Result<AllToAllPlan> plan =
      AllToAllPlan::Build(AllToAllAlgorithm::kHierarchical, *layout, 0, counts, 2);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->steps().size(), 1u) << Describe(*plan);
  EXPECT_EQ(plan->steps()[0].kind, Kind::kCopy);
  EXPECT_EQ(plan->steps()[0].src, AllToAllBuffer::kInput);
  EXPECT_EQ(plan->steps()[0].dst, AllToAllBuffer::kOutput);
}

TEST(AllToAllPlanTest, RejectsMalformedInput) {
  Result<NodeLayout> layout = NodeLayout::Emulated(4, 2);
  ASSERT_TRUE(layout.ok());
  Result<AllToAllPlan> short_matrix =
      AllToAllPlan::Build(AllToAllAlgorithm::kFlat, *layout, 0, Ones(3), 4);
  ASSERT_FALSE(short_matrix.ok());
  EXPECT_EQ(short_matrix.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(short_matrix.status().message().find("4 x 4 = 16"), std::string::npos)
      << short_matrix.status().message();
  Result<AllToAllPlan> no_bytes =
      AllToAllPlan::Build(AllToAllAlgorithm::kFlat, *layout, 0, Ones(4), 0);
  ASSERT_FALSE(no_bytes.ok());
  EXPECT_EQ(no_bytes.status().code(), StatusCode::kInvalidArgument);
}

TEST(AllToAllPlanTest, HierarchicalNeedsEqualNodes) {
  NodeLayout uneven = NodeLayout::FromNodeKeys(std::vector<int>{0, 0, 0, 1});
  Result<AllToAllPlan> plan =
      AllToAllPlan::Build(AllToAllAlgorithm::kHierarchical, uneven, 0, Ones(4), 4);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(plan.status().message().find("2 nodes of 3,1 ranks"), std::string::npos)
      << plan.status().message();
  EXPECT_NE(plan.status().message().find("\"flat\""), std::string::npos);
}

TEST(AllToAllLocalTest, BothAlgorithmsRunOnOneRank) {
  LocalCommunicator world;
  Result<std::unique_ptr<Topology>> topology = Topology::Create(world);
  ASSERT_TRUE(topology.ok()) << topology.status().ToString();
  std::vector<size_t> counts = {6};
  testing::CheckAllToAllAgainstFlat(**topology, counts, 3);
  std::vector<size_t> none = {0};
  testing::CheckAllToAllAgainstFlat(**topology, none, 3);
}

TEST(AllToAllLocalTest, FlatNeedsNoTopology) {
  LocalCommunicator world;
  AllToAll a2a = AllToAll::Flat(world);
  std::vector<size_t> counts = {3};
  Result<AllToAllPlan> plan = a2a.MakePlan(counts, 4);
  ASSERT_TRUE(plan.ok());
  std::vector<int32_t> send = {1, 2, 3}, recv(3, 0), back(3, 0);
  ASSERT_TRUE(a2a.Forward(*plan, send.data(), recv.data(), nullptr).ok());
  EXPECT_EQ(recv, send);
  ASSERT_TRUE(a2a.Reverse(*plan, recv.data(), back.data(), nullptr).ok());
  EXPECT_EQ(back, send);
}

}  // namespace
}  // namespace sy
