// The MoESys capacity rule (launcher/training/capacity_plan.h) on the tiny config, against the
// three inequalities written out by hand.
#include "launcher/training/capacity_plan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sy::launcher {
namespace {

TrainConfig LoadTiny(std::vector<std::string> sets) {
  Result<TrainConfig> config = LoadTrainConfigFile(SY_TINY_CONFIG, sets);
  SY_CHECK(config.ok()) << config.status().message();
  return *config;
}

// tiny.json: hidden 64, moe_intermediate_size 128, 4 experts per MoE layer, 2 MoE layers: an
// expert is gate, up and down, 3 x 64 x 128 parameters.
constexpr double kExpertParameters = 3 * 64 * 128;

TEST(CapacityPlanTest, TheThreeInequalitiesAsTheDigestWritesThem) {
  const TrainConfig config = LoadTiny({});
  const MachineGroup group{2, 1e6, 2e6, 3e6};
  const double alpha = 0.25;
  Result<CapacityPlan> plan = PlanCapacity(config, group, alpha);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const double s = 2 * 4 * kExpertParameters;
  EXPECT_EQ(plan->expert_parameters, static_cast<int64_t>(s));
  EXPECT_EQ(plan->moe_layers, 2);
  const double d = static_cast<double>(plan->dense_parameters);
  EXPECT_GT(d, 0);
  ASSERT_EQ(plan->checks.size(), 3u);
  // The device's coefficients are this build's f32 ones (capacity_plan.h).
  EXPECT_DOUBLE_EQ(plan->checks[0].need_bytes, 16 * d + 8 * alpha * s / 2);
  EXPECT_DOUBLE_EQ(plan->checks[0].have_bytes, 2e6);
  EXPECT_DOUBLE_EQ(plan->checks[1].need_bytes, 16 * alpha * s);
  EXPECT_DOUBLE_EQ(plan->checks[1].have_bytes, 4e6);
  EXPECT_DOUBLE_EQ(plan->checks[2].need_bytes, 12 * s);
  EXPECT_DOUBLE_EQ(plan->checks[2].have_bytes, 6e6);
  // 12 S = 2.36 MB of 6 MB fits; 16 alpha S = 0.79 MB of 4 MB fits; the device's 16 D + ... is
  // about 0.74 MB of 2 MB.
  EXPECT_TRUE(plan->fits());

  // In bf16 the compute copy is 2 bytes beside the f32 master: 18 D + 6 alpha S / L.
  const TrainConfig bf16 = LoadTiny({"train.precision=bf16"});
  Result<CapacityPlan> mixed = PlanCapacity(bf16, group, alpha);
  ASSERT_TRUE(mixed.ok()) << mixed.status().ToString();
  EXPECT_DOUBLE_EQ(mixed->checks[0].need_bytes, 18 * d + 6 * alpha * s / 2);
  EXPECT_EQ(mixed->checks[0].inequality, "18 D + 6 alpha S / L <= M_device x N");
  EXPECT_DOUBLE_EQ(mixed->checks[2].need_bytes, 12 * s);
}

TEST(CapacityPlanTest, SaysWhichTierFailsAndTheLargestExpertCountThatFits) {
  const TrainConfig config = LoadTiny({});
  // An SSD of 3 MB per rank x 1: 12 S <= 3e6 holds up to S = 250000, 2 x E x 24576 <= 250000:
  // E = 5 (4 is configured). Device and CPU are roomy.
  const MachineGroup group{1, 1e9, 1e9, 3e6};
  Result<CapacityPlan> plan = PlanCapacity(config, group, 1.0);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->fits());
  EXPECT_EQ(plan->max_experts, 5);
  EXPECT_EQ(plan->limited_by, "ssd");

  const MachineGroup small_ssd{1, 1e9, 1e9, 1e6};  // 12 S = 2.36 MB > 1 MB
  plan = PlanCapacity(config, small_ssd, 1.0);
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->fits());
  EXPECT_FALSE(plan->checks[2].fits());
  EXPECT_TRUE(plan->checks[0].fits());
  // Even top_k = 2 experts need 12 x 2 x 2 x 24576 = 1.18 MB > 1 MB: none fits.
  EXPECT_EQ(plan->max_experts, 0);
  EXPECT_EQ(plan->limited_by, "ssd");
}

TEST(CapacityPlanTest, AlphaFromTheCacheBudgetAndBadInput) {
  TrainConfig config = LoadTiny({"expert_store.dir=/tmp/x", "expert_store.cache_mib=0.75"});
  // 0.75 MiB over 16 B per parameter of S = 196608: alpha = 786432 / 3145728 = 0.25.
  EXPECT_DOUBLE_EQ(ConfiguredAlpha(config, 1), 0.25);
  EXPECT_DOUBLE_EQ(ConfiguredAlpha(config, 8), 1.0);  // capped
  EXPECT_DOUBLE_EQ(ConfiguredAlpha(LoadTiny({}), 1), 1.0);
  EXPECT_EQ(PlanCapacity(config, {1, 1, 1, 1}, 0.0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanCapacity(config, {0, 1, 1, 1}, 0.5).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sy::launcher
