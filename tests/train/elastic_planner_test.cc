// Task placements (launcher/training/task_placement.h) and the elastic planner
// (launcher/training/elastic_planner.h): the slices cover every row once, per_task follows config
// order, the planner gives heavy tasks several ranks and merges light ones, calibration recovers
// a known cost model, and a slow rank gets less work.
#include <gtest/gtest.h>

#include <numeric>

#include "launcher/training/elastic_planner.h"
#include "launcher/training/task_placement.h"

namespace sy::launcher {
namespace {

// Every row of every task is on exactly one rank.
void ExpectCoversOnce(const TaskPlacement& p, const std::vector<int64_t>& rows) {
  std::vector<std::vector<int>> seen(rows.size());
  for (size_t t = 0; t < rows.size(); ++t) seen[t].assign(static_cast<size_t>(rows[t]), 0);
  for (int r = 0; r < p.world; ++r) {
    for (const TaskSlice& s : p.SlicesOf(r, rows)) {
      for (int64_t i = s.begin; i < s.end; ++i) ++seen[static_cast<size_t>(s.task)][i];
    }
  }
  for (size_t t = 0; t < rows.size(); ++t) {
    for (int64_t i = 0; i < rows[t]; ++i) EXPECT_EQ(seen[t][i], 1) << "task " << t << " row " << i;
  }
}

CostShape Shape() {
  CostShape s;
  s.seq_len = 16;
  s.num_layers = 2;
  return s;
}

TEST(TaskPlacementTest, UniformAndPerTask) {
  const std::vector<int64_t> rows = {8, 4, 2, 2, 0};
  const TaskPlacement u = UniformPlacement(rows, 4);
  ExpectCoversOnce(u, rows);
  EXPECT_EQ(u.RowsPerRank(rows), (std::vector<int64_t>{4, 4, 4, 4}));
  Result<TaskPlacement> p = PerTaskPlacement(rows, 8);
  ASSERT_TRUE(p.ok());
  ExpectCoversOnce(*p, rows);
  EXPECT_EQ(p->ranks_of_task[0], (std::vector<int>{0, 1}));
  EXPECT_EQ(p->ranks_of_task[3], (std::vector<int>{6, 7}));
  EXPECT_TRUE(p->ranks_of_task[4].empty());
  EXPECT_EQ(p->RowsPerRank(rows), (std::vector<int64_t>{4, 4, 2, 2, 1, 1, 1, 1}));
  EXPECT_TRUE(p->Check(rows).ok());
  EXPECT_NE(PerTaskPlacement(rows, 6).status().message().find("train.placement"),
            std::string::npos);
  EXPECT_EQ(TaskPlacement::Decode(p->Encode()), *p);
  EXPECT_EQ(p->Describe(rows, {"copy", "reverse", "sort", "modadd", "markov"}),
            "copy: ranks 0,1 (4/4 rows); reverse: ranks 2,3 (2/2 rows); sort: ranks 4,5 (1/1 "
            "rows); modadd: ranks 6,7 (1/1 rows)");
  // A rank without rows is refused: it could not take part in the expert layers' exchanges.
  EXPECT_FALSE(UniformPlacement({2, 0, 0, 0, 0}, 4).Check({2, 0, 0, 0, 0}).ok());
}

TEST(ElasticPlannerTest, HeavyTasksSplitLightTasksMerge) {
  // MoESys Table III's workloads 4:2:1:1 on 8 ranks: 4/2/1/1 ranks.
  const std::vector<int64_t> rows = {32, 16, 8, 8, 0};
  Result<TaskPlacement> p = PlanElastic(CostModel{}, Shape(), rows, 8);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ExpectCoversOnce(*p, rows);
  EXPECT_EQ(p->ranks_of_task[0].size(), 4u);
  EXPECT_EQ(p->ranks_of_task[1].size(), 2u);
  EXPECT_EQ(p->RowsPerRank(rows), std::vector<int64_t>(8, 8));
  // On 4 ranks: copy on two, reverse on one, sort and modadd merged on one.
  Result<TaskPlacement> four = PlanElastic(CostModel{}, Shape(), rows, 4);
  ASSERT_TRUE(four.ok());
  ExpectCoversOnce(*four, rows);
  EXPECT_EQ(four->RowsPerRank(rows), std::vector<int64_t>(4, 16));
  EXPECT_EQ(four->ranks_of_task[2].size(), 1u);
  EXPECT_EQ(four->ranks_of_task[2], four->ranks_of_task[3]);
  const CostModel cost;
  const double per_task = PredictStepSeconds(cost, Shape(), *PerTaskPlacement(rows, 4), rows);
  const double elastic = PredictStepSeconds(cost, Shape(), *four, rows);
  EXPECT_DOUBLE_EQ(per_task / elastic, 2.0);  // the slowest rank had 32 rows, now 16
  EXPECT_FALSE(PlanElastic(CostModel{}, Shape(), {1, 1, 0, 0, 0}, 4).ok());
}

TEST(ElasticPlannerTest, CalibrationRecoversTheCostAndASlowRank) {
  const CostShape shape = Shape();
  // Ranks computing 64, 128, 256, 512 tokens at 0.01 s + 1e-5 s per token-layer; rank 1 is twice
  // as slow in its per-token part.
  std::vector<RankSample> samples;
  for (int r = 0; r < 4; ++r) {
    const int64_t tokens = int64_t{64} << r;
    const double speed = r == 1 ? 2.0 : 1.0;
    samples.push_back({0.01 + speed * 1e-5 * static_cast<double>(tokens) * 2, 0.001, tokens});
  }
  const CostModel fit = CalibrateCostModel(samples, shape);
  EXPECT_TRUE(fit.calibrated);
  EXPECT_GT(fit.rank_speed[1], 1.3);
  EXPECT_NEAR(fit.rank_speed[2], 1.0, 0.2);
  EXPECT_NEAR(fit.rank_speed[3], 1.0, 0.2);
  // A uniform load measured at the same cost: the fit is exact.
  std::vector<RankSample> even(4, RankSample{0.01 + 1e-5 * 128 * 2, 0.0, 128});
  even[0].tokens = 64;
  even[0].compute_seconds = 0.01 + 1e-5 * 64 * 2;
  const CostModel exact = CalibrateCostModel(even, shape);
  EXPECT_NEAR(exact.fixed, 0.01, 1e-9);
  EXPECT_NEAR(exact.per_token_layer, 1e-5, 1e-12);
  // The slow rank gets fewer rows than the others.
  CostModel slow;
  slow.rank_speed = {1, 1, 1, 2};
  const std::vector<int64_t> rows = {16, 16, 16, 16, 0};
  Result<TaskPlacement> p = PlanElastic(slow, shape, rows, 4);
  ASSERT_TRUE(p.ok());
  ExpectCoversOnce(*p, rows);
  const std::vector<int64_t> per_rank = p->RowsPerRank(rows);
  EXPECT_LT(per_rank[3], per_rank[0]);
  EXPECT_LT(PredictStepSeconds(slow, shape, *p, rows),
            PredictStepSeconds(slow, shape, UniformPlacement(rows, 4), rows));
}

}  // namespace
}  // namespace sy::launcher
