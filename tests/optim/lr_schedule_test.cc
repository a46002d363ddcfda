// LrSchedule against closed forms evaluated by hand (cos(pi/3) = 1/2, cos(pi/2) = 0, ...), and
// against HF's lambdas written out independently in the test.
#include "optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "runtime/core/check.h"

namespace sy {
namespace {

LrSchedule Make(LrScheduleKind kind, double lr, double min_lr, int64_t warmup, int64_t total) {
  LrScheduleOptions o;
  o.kind = kind;
  o.lr = lr;
  o.min_lr = min_lr;
  o.warmup_steps = warmup;
  o.total_steps = total;
  auto s = LrSchedule::Create(o);
  SY_CHECK(s.ok()) << s.status().ToString();
  return *s;
}

TEST(LrScheduleTest, WarmupCosineAtKnownPoints) {
  // W = 10, T = 130: the decay spans 120 steps.
  LrSchedule s = Make(LrScheduleKind::kWarmupCosine, 1e-3, 1e-4, 10, 130);
  EXPECT_DOUBLE_EQ(s.Lr(0), 0.0);
  EXPECT_DOUBLE_EQ(s.Lr(1), 1e-4);
  EXPECT_DOUBLE_EQ(s.Lr(5), 5e-4);
  EXPECT_DOUBLE_EQ(s.Lr(10), 1e-3);
  EXPECT_DOUBLE_EQ(s.Lr(50), 1e-4 + 9e-4 * 0.75);  // progress 1/3: cos = 1/2
  EXPECT_DOUBLE_EQ(s.Lr(70), 1e-4 + 9e-4 * 0.5);   // progress 1/2: cos = 0
  EXPECT_DOUBLE_EQ(s.Lr(90), 1e-4 + 9e-4 * 0.25);  // progress 2/3: cos = -1/2
  EXPECT_DOUBLE_EQ(s.Lr(130), 1e-4);
  EXPECT_DOUBLE_EQ(s.Lr(1000), 1e-4);  // held at min_lr after the end
}

TEST(LrScheduleTest, WarmupCosineMatchesHuggingFaceLambda) {
  // transformers' get_cosine_with_min_lr_schedule_with_warmup, num_cycles 0.5, as LambdaLR does
  // it: base_lr * lambda(step).
  const double lr = 3e-4, min_lr = 3e-5;
  const int64_t warmup = 7, total = 57;
  LrSchedule s = Make(LrScheduleKind::kWarmupCosine, lr, min_lr, warmup, total);
  for (int64_t step = 0; step <= total; ++step) {
    double lambda;
    if (step < warmup) {
      lambda = static_cast<double>(step) / warmup;
    } else {
      double progress = static_cast<double>(step - warmup) / (total - warmup);
      double factor = 0.5 * (1.0 + std::cos(std::numbers::pi * 0.5 * 2.0 * progress));
      lambda = factor * (1 - min_lr / lr) + min_lr / lr;
    }
    EXPECT_NEAR(s.Lr(step), lr * lambda, 1e-15) << step;
  }
}

TEST(LrScheduleTest, WarmupLinear) {
  LrSchedule s = Make(LrScheduleKind::kWarmupLinear, 2e-3, 0.0, 4, 24);
  EXPECT_DOUBLE_EQ(s.Lr(0), 0.0);
  EXPECT_DOUBLE_EQ(s.Lr(2), 1e-3);
  EXPECT_DOUBLE_EQ(s.Lr(4), 2e-3);
  EXPECT_DOUBLE_EQ(s.Lr(9), 1.5e-3);  // a quarter of the way down
  EXPECT_DOUBLE_EQ(s.Lr(14), 1e-3);
  EXPECT_DOUBLE_EQ(s.Lr(24), 0.0);
  EXPECT_DOUBLE_EQ(s.Lr(30), 0.0);
  LrSchedule floor = Make(LrScheduleKind::kWarmupLinear, 2e-3, 1e-3, 0, 10);
  EXPECT_DOUBLE_EQ(floor.Lr(0), 2e-3);
  EXPECT_DOUBLE_EQ(floor.Lr(5), 1.5e-3);
  EXPECT_DOUBLE_EQ(floor.Lr(10), 1e-3);
}

TEST(LrScheduleTest, ConstantWithAndWithoutWarmup) {
  LrSchedule plain = Make(LrScheduleKind::kConstant, 1e-3, 0.0, 0, 0);
  EXPECT_DOUBLE_EQ(plain.Lr(0), 1e-3);
  EXPECT_DOUBLE_EQ(plain.Lr(123456), 1e-3);
  LrSchedule warm = Make(LrScheduleKind::kConstant, 1e-3, 0.0, 4, 0);
  EXPECT_DOUBLE_EQ(warm.Lr(1), 2.5e-4);
  EXPECT_DOUBLE_EQ(warm.Lr(4), 1e-3);
  EXPECT_DOUBLE_EQ(warm.Lr(99), 1e-3);
}

TEST(LrScheduleTest, RejectsBadOptionsByName) {
  LrScheduleOptions o;
  o.total_steps = 0;  // a cosine schedule without a length
  auto bad = LrSchedule::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("total_steps"), std::string::npos);
  o.total_steps = 100;
  o.min_lr = 1.0;  // above lr
  bad = LrSchedule::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("min_lr"), std::string::npos);
  o.min_lr = 0.0;
  o.warmup_steps = 200;
  bad = LrSchedule::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("total_steps"), std::string::npos);
  auto kind = ParseLrScheduleKind("cosine");
  ASSERT_TRUE(kind.ok());
  EXPECT_EQ(*kind, LrScheduleKind::kWarmupCosine);
  EXPECT_FALSE(ParseLrScheduleKind("step").ok());
}

}  // namespace
}  // namespace sy
