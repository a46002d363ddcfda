// Topology over MPI: real nodes (all ranks of this test share one machine) and emulated nodes.
// Run with 4 ranks.
#include <gtest/gtest.h>

#include "parallel/topology.h"
#include "tests/parallel/collective_checks.h"
#include "tests/parallel/mpi_test_env.h"

namespace sy {
namespace {

using testing::TestMpi;

TEST(TopologyMpiTest, RealNodesGroupRanksSharingMemory) {
  MpiCommunicator& world = TestMpi().world();
  Result<std::unique_ptr<Topology>> topology = Topology::Create(world);
  ASSERT_TRUE(topology.ok()) << topology.status().ToString();
  const Topology& t = **topology;
  EXPECT_EQ(t.num_nodes(), 1);
  EXPECT_FALSE(t.layout().emulated());
  EXPECT_EQ(t.local_rank(), world.rank());
  EXPECT_EQ(t.intra_node().size(), world.size());
  EXPECT_EQ(t.inter_node().size(), 1);
  testing::CheckTopologyCommunicators(t);
}

TEST(TopologyMpiTest, EmulatedNodes) {
  MpiCommunicator& world = TestMpi().world();
  ASSERT_EQ(world.size() % 2, 0) << "run with an even number of ranks";
  Result<std::unique_ptr<Topology>> topology =
      Topology::Create(world, TopologyOptions{.ranks_per_node = 2});
  ASSERT_TRUE(topology.ok()) << topology.status().ToString();
  const Topology& t = **topology;
  EXPECT_EQ(t.num_nodes(), world.size() / 2);
  EXPECT_TRUE(t.layout().emulated());
  EXPECT_EQ(t.node(), world.rank() / 2);
  EXPECT_EQ(t.local_rank(), world.rank() % 2);
  EXPECT_EQ(t.inter_node().rank(), t.node());
  EXPECT_EQ(t.inter_node().size(), world.size() / 2);
  testing::CheckTopologyCommunicators(t);
  testing::CheckCollectives(t.intra_node());
  testing::CheckCollectives(t.inter_node());
}

TEST(TopologyMpiTest, RanksPerNodeMustDivideTheJob) {
  MpiCommunicator& world = TestMpi().world();
  Result<std::unique_ptr<Topology>> topology =
      Topology::Create(world, TopologyOptions{.ranks_per_node = world.size() + 1});
  ASSERT_FALSE(topology.ok());
  EXPECT_EQ(topology.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(topology.status().message().find("topology.ranks_per_node"), std::string::npos)
      << topology.status().message();
}

}  // namespace
}  // namespace sy
