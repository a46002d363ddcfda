// DynamicLossScaler against the rules torch.cuda.amp.GradScaler documents (init 2^16, x2 after
// 2000 consecutive finite steps, x0.5 and a reset on inf/NaN, no growth into inf), and the
// inf/NaN check + unscale over many buffers.
#include "optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace sy {
namespace {

TEST(DynamicLossScalerTest, DefaultsAreGradScalers) {
  auto scaler = DynamicLossScaler::Create(LossScalerOptions{});
  ASSERT_TRUE(scaler.ok());
  EXPECT_EQ(scaler->scale(), 65536.0f);
  EXPECT_EQ(scaler->inv_scale(), 1.0f / 65536.0f);
  EXPECT_EQ(scaler->options().growth_interval, 2000);
  EXPECT_EQ(scaler->options().growth_factor, 2.0);
  EXPECT_EQ(scaler->options().backoff_factor, 0.5);
}

TEST(DynamicLossScalerTest, GrowsAfterExactlyGrowthIntervalGoodSteps) {
  auto scaler = DynamicLossScaler::Create(LossScalerOptions{});
  ASSERT_TRUE(scaler.ok());
  for (int i = 0; i < 1999; ++i) scaler->Update(false);
  EXPECT_EQ(scaler->scale(), 65536.0f);
  EXPECT_EQ(scaler->growth_tracker(), 1999);
  scaler->Update(false);  // the 2000th
  EXPECT_EQ(scaler->scale(), 131072.0f);
  EXPECT_EQ(scaler->growth_tracker(), 0);
  for (int i = 0; i < 2000; ++i) scaler->Update(false);
  EXPECT_EQ(scaler->scale(), 262144.0f);
}

TEST(DynamicLossScalerTest, BackoffHalvesAndRestartsTheRun) {
  auto scaler = DynamicLossScaler::Create(LossScalerOptions{});
  ASSERT_TRUE(scaler.ok());
  for (int i = 0; i < 1500; ++i) scaler->Update(false);
  scaler->Update(true);
  EXPECT_EQ(scaler->scale(), 32768.0f);
  EXPECT_EQ(scaler->growth_tracker(), 0);
  scaler->Update(true);
  EXPECT_EQ(scaler->scale(), 16384.0f);
  // The 1500 earlier good steps no longer count: growth needs 2000 new ones.
  for (int i = 0; i < 1999; ++i) scaler->Update(false);
  EXPECT_EQ(scaler->scale(), 16384.0f);
  scaler->Update(false);
  EXPECT_EQ(scaler->scale(), 32768.0f);
}

TEST(DynamicLossScalerTest, MixedSequenceWithCustomOptions) {
  LossScalerOptions o;
  o.init_scale = 8.0;
  o.growth_factor = 3.0;
  o.backoff_factor = 0.25;
  o.growth_interval = 2;
  auto scaler = DynamicLossScaler::Create(o);
  ASSERT_TRUE(scaler.ok());
  // (found_inf, expected scale after Update), worked out by hand from the rules.
  const std::pair<bool, float> sequence[] = {
      {false, 8.0f}, {false, 24.0f}, {false, 24.0f}, {true, 6.0f},  {false, 6.0f},
      {true, 1.5f},  {false, 1.5f},  {false, 4.5f},  {false, 4.5f}, {false, 13.5f},
  };
  for (const auto& [found_inf, want] : sequence) {
    scaler->Update(found_inf);
    EXPECT_EQ(scaler->scale(), want);
  }
}

TEST(DynamicLossScalerTest, NeverGrowsIntoInfinity) {
  LossScalerOptions o;
  o.init_scale = 3e38;
  o.growth_interval = 1;
  auto scaler = DynamicLossScaler::Create(o);
  ASSERT_TRUE(scaler.ok());
  scaler->Update(false);
  EXPECT_EQ(scaler->scale(), 3e38f);
  EXPECT_EQ(scaler->growth_tracker(), 0);
}

TEST(DynamicLossScalerTest, StateRoundTripsAndRestoreValidates) {
  auto a = DynamicLossScaler::Create(LossScalerOptions{});
  auto b = DynamicLossScaler::Create(LossScalerOptions{});
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 2100; ++i) a->Update(i == 7);
  ASSERT_TRUE(b->Restore(a->state()).ok());
  EXPECT_EQ(b->scale(), a->scale());
  EXPECT_EQ(b->growth_tracker(), a->growth_tracker());
  EXPECT_FALSE(b->Restore({0.0f, 0}).ok());
  EXPECT_FALSE(b->Restore({1.0f, 2000}).ok());
}

TEST(DynamicLossScalerTest, RejectsBadOptionsByName) {
  LossScalerOptions o;
  o.backoff_factor = 1.0;
  auto bad = DynamicLossScaler::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("backoff_factor"), std::string::npos);
  o = LossScalerOptions{};
  o.growth_interval = 0;
  bad = DynamicLossScaler::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("growth_interval"), std::string::npos);
}

TEST(UnscaleGradsTest, UnscalesEveryElementAndReportsFinite) {
  std::vector<std::vector<float>> grads = {std::vector<float>(70003), std::vector<float>(5)};
  for (auto& g : grads) {
    for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 1000) * 3.0f - 7.0f;
  }
  auto original = grads;
  std::vector<std::span<float>> spans(grads.begin(), grads.end());
  ThreadPool pool(2);
  EXPECT_FALSE(UnscaleGradsAndCheckNonFinite(spans, 0.125f, &pool));
  for (size_t b = 0; b < grads.size(); ++b) {
    for (size_t i = 0; i < grads[b].size(); ++i) {
      ASSERT_EQ(grads[b][i], original[b][i] * 0.125f);
    }
  }
}

TEST(UnscaleGradsTest, FindsInfOrNanAnywhere) {
  ThreadPool pool(2);
  const float bad_values[] = {INFINITY, -INFINITY, std::numeric_limits<float>::quiet_NaN()};
  // Positions in the vector body, the scalar tail and a later chunk of a large buffer.
  const size_t positions[] = {0, 8, 70002, 65536};
  for (float bad : bad_values) {
    for (size_t pos : positions) {
      std::vector<float> a(70003, 1.0f), b(3, 1.0f);
      a[pos] = bad;
      std::vector<std::span<float>> spans = {a, b};
      EXPECT_TRUE(UnscaleGradsAndCheckNonFinite(spans, 0.5f, &pool)) << bad << " at " << pos;
    }
    std::vector<float> a(10, 1.0f), b(3, 1.0f);
    b[2] = bad;  // in the last, tiny buffer
    std::vector<std::span<float>> spans = {a, b};
    EXPECT_TRUE(UnscaleGradsAndCheckNonFinite(spans, 0.5f, nullptr));
  }
  // Large but finite values are not overflow.
  std::vector<float> big(100, std::numeric_limits<float>::max());
  std::vector<std::span<float>> spans = {big};
  EXPECT_FALSE(UnscaleGradsAndCheckNonFinite(spans, 1.0f, nullptr));
}

}  // namespace
}  // namespace sy
