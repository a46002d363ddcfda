// The topology and the all-to-all run end to end on ThreadCommunicator: every rank is a thread,
// so many rank counts, emulated and "real" node layouts (including round-robin numbering) and
// count patterns run in one fast process. The MPI tests repeat the essentials over OpenMPI.
#include <gtest/gtest.h>

#include <vector>

#include "parallel/all_to_all.h"
#include "parallel/topology.h"
#include "tests/parallel/all_to_all_checks.h"
#include "tests/parallel/collective_checks.h"
#include "tests/parallel/thread_communicator.h"

namespace sy {
namespace {

using testing::CountPattern;
using testing::RunThreadGroup;

TEST(ThreadCommunicatorTest, PassesTheCollectiveChecks) {
  for (int size : {1, 2, 3, 5}) {
    SCOPED_TRACE(size);
    RunThreadGroup(size, {}, [](Communicator& world) {
      testing::CheckCollectives(world);
      testing::CheckSendRecvRing(world);
      testing::CheckSplit(world);
    });
  }
}

TEST(TopologyThreadTest, RealNodesFromSharedMemoryGroups) {
  RunThreadGroup(4, {7, 7, 9, 9}, [](Communicator& world) {
    Result<std::unique_ptr<Topology>> topology = Topology::Create(world);
    ASSERT_TRUE(topology.ok()) << topology.status().ToString();
    const Topology& t = **topology;
    EXPECT_EQ(t.layout().ToString(), "2 nodes x 2 ranks");
    EXPECT_FALSE(t.layout().emulated());
    EXPECT_TRUE(t.layout().contiguous());
    EXPECT_EQ(t.node(), world.rank() / 2);
    EXPECT_EQ(t.local_rank(), world.rank() % 2);
    EXPECT_EQ(t.inter_node().rank(), t.node());
    testing::CheckTopologyCommunicators(t);
  });
}

TEST(TopologyThreadTest, RoundRobinPlacementIsNotNodeMajor) {
  RunThreadGroup(6, {0, 1, 0, 1, 0, 1}, [](Communicator& world) {
    Result<std::unique_ptr<Topology>> topology = Topology::Create(world);
    ASSERT_TRUE(topology.ok()) << topology.status().ToString();
    const Topology& t = **topology;
    EXPECT_EQ(t.num_nodes(), 2);
    EXPECT_EQ(t.layout().ranks_per_node(), 3);
    EXPECT_FALSE(t.layout().contiguous());
    EXPECT_EQ(t.node(), world.rank() % 2);
    EXPECT_EQ(t.local_rank(), world.rank() / 2);
    EXPECT_EQ(t.layout().rank_of(1, 2), 5);
    testing::CheckTopologyCommunicators(t);
  });
}

TEST(TopologyThreadTest, EmulatedNodesIgnoreTheMachines) {
  RunThreadGroup(8, {}, [](Communicator& world) {
    Result<std::unique_ptr<Topology>> topology =
        Topology::Create(world, TopologyOptions{.ranks_per_node = 2});
    ASSERT_TRUE(topology.ok()) << topology.status().ToString();
    EXPECT_EQ((*topology)->layout().ToString(), "4 nodes x 2 ranks (emulated)");
    EXPECT_EQ((*topology)->inter_node().size(), 4);
    testing::CheckTopologyCommunicators(**topology);
  });
}

TEST(TopologyThreadTest, UnequalNodes) {
  RunThreadGroup(3, {0, 0, 1}, [](Communicator& world) {
    Result<std::unique_ptr<Topology>> topology = Topology::Create(world);
    ASSERT_TRUE(topology.ok()) << topology.status().ToString();
    const Topology& t = **topology;
    EXPECT_FALSE(t.layout().uniform());
    EXPECT_EQ(t.layout().ranks_per_node(), 0);
    EXPECT_EQ(t.layout().ToString(), "2 nodes of 2,1 ranks");
    testing::CheckTopologyCommunicators(t);

    Result<AllToAll> hier = AllToAll::Create(t, AllToAllAlgorithm::kHierarchical);
    ASSERT_FALSE(hier.ok());
    EXPECT_EQ(hier.status().code(), StatusCode::kFailedPrecondition);
    // Flat still works on unequal nodes.
    Result<AllToAll> flat = AllToAll::Create(t, AllToAllAlgorithm::kFlat);
    ASSERT_TRUE(flat.ok());
    std::vector<size_t> counts(3, 1);
    Result<AllToAllPlan> plan = flat->MakePlan(counts, 8);
    ASSERT_TRUE(plan.ok());
    std::vector<int64_t> send = {world.rank() * 10, world.rank() * 10 + 1, world.rank() * 10 + 2};
    std::vector<int64_t> recv(3, -1);
    ASSERT_TRUE(flat->Forward(*plan, send.data(), recv.data(), nullptr).ok());
    for (int p = 0; p < 3; ++p) EXPECT_EQ(recv[p], p * 10 + world.rank());
  });
}

TEST(TopologyThreadTest, RejectsRanksPerNodeThatDoesNotDivide) {
  RunThreadGroup(4, {}, [](Communicator& world) {
    for (int bad : {3, -1}) {
      Result<std::unique_ptr<Topology>> topology =
          Topology::Create(world, TopologyOptions{.ranks_per_node = bad});
      ASSERT_FALSE(topology.ok());
      EXPECT_EQ(topology.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(topology.status().message().find("topology.ranks_per_node"), std::string::npos)
          << topology.status().message();
    }
  });
}

TEST(NodeLayoutTest, EmulatedAndKeyedLayouts) {
  Result<NodeLayout> emulated = NodeLayout::Emulated(6, 3);
  ASSERT_TRUE(emulated.ok());
  EXPECT_EQ(emulated->num_nodes(), 2);
  EXPECT_EQ(emulated->rank_of(1, 2), 5);
  EXPECT_EQ(emulated->rank_of(1, 3), -1);
  EXPECT_TRUE(emulated->contiguous());
  EXPECT_FALSE(NodeLayout::Emulated(6, 4).ok());
  NodeLayout keyed = NodeLayout::FromNodeKeys(std::vector<int>{4, 4, 4, 2, 2, 2});
  EXPECT_EQ(keyed.node_of(3), 1);
  EXPECT_EQ(keyed.local_rank_of(5), 2);
  EXPECT_FALSE(keyed == *emulated) << "emulated differs from real";
  NodeLayout same = NodeLayout::FromNodeKeys(std::vector<int>{0, 0, 0, 1, 1, 1});
  EXPECT_TRUE(keyed == same);
}

struct LayoutCase {
  int size;
  int ranks_per_node;         // > 0: emulated
  std::vector<int> machines;  // used when ranks_per_node == 0
};

std::vector<LayoutCase> LayoutCases() {
  std::vector<LayoutCase> cases;
  for (int size : {2, 3, 4, 6, 8}) {
    for (int per_node = 1; per_node <= size; ++per_node) {
      if (size % per_node == 0) cases.push_back({size, per_node, {}});
    }
  }
  // Real machines numbered round-robin (2 machines), and scrambled.
  cases.push_back({4, 0, {0, 1, 0, 1}});
  cases.push_back({6, 0, {0, 1, 2, 0, 1, 2}});
  cases.push_back({8, 0, {0, 1, 0, 1, 0, 1, 0, 1}});
  cases.push_back({4, 0, {1, 0, 0, 1}});
  cases.push_back({6, 0, {2, 0, 1, 1, 2, 0}});
  return cases;
}

TEST(AllToAllThreadTest, HierarchicalMatchesFlatForwardAndReverse) {
  for (const LayoutCase& c : LayoutCases()) {
    for (CountPattern pattern : {CountPattern::kRandom, CountPattern::kEmptyRank,
                                 CountPattern::kSkewed, CountPattern::kAllZero}) {
      for (uint32_t seed : {1u, 2u}) {
        for (size_t elem_bytes : {size_t{1}, size_t{12}}) {
          SCOPED_TRACE(::testing::Message()
                       << "size " << c.size << " ranks_per_node " << c.ranks_per_node << " "
                       << testing::CountPatternName(pattern) << " seed " << seed << " elem "
                       << elem_bytes);
          std::vector<size_t> counts = testing::MakeCountMatrix(c.size, pattern, seed, 6);
          RunThreadGroup(c.size, c.machines, [&](Communicator& world) {
            Result<std::unique_ptr<Topology>> topology =
                Topology::Create(world, TopologyOptions{.ranks_per_node = c.ranks_per_node});
            ASSERT_TRUE(topology.ok()) << topology.status().ToString();
            testing::CheckAllToAllAgainstFlat(**topology, counts, elem_bytes);
          });
        }
      }
    }
  }
}

}  // namespace
}  // namespace sy
