// The hierarchical all-to-all against the flat one over OpenMPI: every emulated node count that
// divides the job (1, 2, 4 nodes), real nodes, and count matrices with zeros, an empty rank,
// a hot destination and nothing at all; forward and reverse. Run with 2, 4 and 8 ranks.
#include <gtest/gtest.h>

#include "parallel/all_to_all.h"
#include "parallel/topology.h"
#include "tests/parallel/all_to_all_checks.h"
#include "tests/parallel/mpi_test_env.h"

namespace sy {
namespace {

using testing::CountPattern;
using testing::TestMpi;

void CheckAllPatterns(const Topology& topology) {
  const int P = topology.world().size();
  for (CountPattern pattern : {CountPattern::kRandom, CountPattern::kEmptyRank,
                               CountPattern::kSkewed, CountPattern::kAllZero}) {
    for (uint32_t seed : {11u, 12u}) {
      SCOPED_TRACE(::testing::Message() << topology.layout() << ", "
                                        << testing::CountPatternName(pattern) << ", seed " << seed);
      std::vector<size_t> counts = testing::MakeCountMatrix(P, pattern, seed, 5);
      testing::CheckAllToAllAgainstFlat(topology, counts, seed == 11u ? 12 : 1);
    }
  }
}

TEST(AllToAllMpiTest, EmulatedNodes) {
  MpiCommunicator& world = TestMpi().world();
  for (int nodes : {1, 2, 4}) {
    if (world.size() % nodes != 0) continue;
    Result<std::unique_ptr<Topology>> topology =
        Topology::Create(world, TopologyOptions{.ranks_per_node = world.size() / nodes});
    ASSERT_TRUE(topology.ok()) << topology.status().ToString();
    ASSERT_EQ((*topology)->num_nodes(), nodes);
    CheckAllPatterns(**topology);
  }
}

TEST(AllToAllMpiTest, RealNodes) {
  Result<std::unique_ptr<Topology>> topology = Topology::Create(TestMpi().world());
  ASSERT_TRUE(topology.ok()) << topology.status().ToString();
  CheckAllPatterns(**topology);
}

// A dispatch/combine round trip of f32 token rows, as expert parallelism uses it.
TEST(AllToAllMpiTest, TokenRowsRoundTrip) {
  MpiCommunicator& world = TestMpi().world();
  const int P = world.size();
  const int me = world.rank();
  constexpr size_t kHidden = 8;
  Result<std::unique_ptr<Topology>> topology =
      Topology::Create(world, TopologyOptions{.ranks_per_node = P >= 2 ? 2 : 1});
  ASSERT_TRUE(topology.ok()) << topology.status().ToString();
  Result<AllToAll> a2a = AllToAll::Create(**topology, AllToAllAlgorithm::kHierarchical);
  ASSERT_TRUE(a2a.ok()) << a2a.status().ToString();
  std::vector<size_t> rows(P);
  for (int p = 0; p < P; ++p) rows[p] = static_cast<size_t>((me + p) % 3);
  Result<AllToAllPlan> plan = a2a->MakePlan(rows, kHidden * sizeof(float));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  std::vector<float> tokens(plan->send_elements() * kHidden);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = float(me) + 0.001f * float(i);
  std::vector<float> expert_in(plan->recv_elements() * kHidden, -1.0f);
  std::vector<std::byte> workspace(plan->workspace_bytes());
  ASSERT_TRUE(a2a->Forward(*plan, tokens.data(), expert_in.data(), workspace.data()).ok());
  // Each received row starts with the sender's rank in its integer part.
  for (int s = 0; s < P; ++s) {
    for (size_t row = 0; row < plan->recv_counts()[s]; ++row) {
      const float first = expert_in[(plan->recv_displs()[s] + row) * kHidden];
      EXPECT_EQ(static_cast<int>(first), s) << "row " << row << " from rank " << s;
    }
  }
  // "Experts" double every value; the combine brings each row back to its token.
  for (float& v : expert_in) v *= 2.0f;
  std::vector<float> combined(tokens.size(), 0.0f);
  ASSERT_TRUE(a2a->Reverse(*plan, expert_in.data(), combined.data(), workspace.data()).ok());
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(combined[i], 2.0f * tokens[i]);
}

}  // namespace
}  // namespace sy
