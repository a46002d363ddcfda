// SigmoidRoute (runtime/model/sigmoid_routing.h) on hand-made rows whose choices and weights are
// worked out here from transformers' Glm4MoeTopkRouter: the bias chooses without weighing, the
// group limit, its masked experts at 0 (not -inf, as transformers masks), renormalisation and
// the scaling factor, and a NaN logit that must not break the order. The model-level oracles
// (tests/inference/hf_moe_oracle.py, hf_transformers_oracle.py) check it inside GLM-4.5.
#include "runtime/model/sigmoid_routing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace sy {
namespace {

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

TEST(SigmoidRoutingTest, TheBiasChoosesAndTheScoresWeigh) {
  // Scores sigmoid(logits); the bias lifts expert 3 above expert 0, whose score is higher.
  const std::vector<float> logits = {1.0f, -1.0f, 0.0f, 0.5f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.3f};
  SigmoidRouting r = SigmoidRoute(
      logits, bias,
      {.num_experts = 4, .top_k = 2, .norm_topk_prob = true, .routed_scaling_factor = 2.5f});
  ASSERT_EQ(r.experts, (std::vector<int32_t>{3, 0}));  // 0.92 and 0.73 to choose
  const float s3 = Sigmoid(0.5f), s0 = Sigmoid(1.0f);
  EXPECT_FLOAT_EQ(r.weights[0], s3 / (s3 + s0) * 2.5f);
  EXPECT_FLOAT_EQ(r.weights[1], s0 / (s3 + s0) * 2.5f);
  r = SigmoidRoute(logits, bias, {.num_experts = 4, .top_k = 2, .norm_topk_prob = false});
  EXPECT_FLOAT_EQ(r.weights[0], s3);
  EXPECT_FLOAT_EQ(r.weights[1], s0);
}

TEST(SigmoidRoutingTest, GroupsKeepTheBestTopkGroupsByTheirTwoBest) {
  // Groups {0,1} and {2,3}: worth 0.5+0.6 = 1.1 and 0.45+0.7 = 1.15; the second stays, so the
  // top-1 is expert 3 though expert 1 beats expert 2.
  const std::vector<float> logits = {0.0f, 0.0f, 0.0f, 0.0f};
  const std::vector<float> bias = {0.0f, 0.1f, -0.05f, 0.2f};
  SigmoidRouting r =
      SigmoidRoute(logits, bias, {.num_experts = 4, .top_k = 2, .num_groups = 2, .topk_groups = 1});
  EXPECT_EQ(r.experts, (std::vector<int32_t>{3, 2}));
  // Without the limit: 3, then 1.
  r = SigmoidRoute(logits, bias, {.num_experts = 4, .top_k = 2});
  EXPECT_EQ(r.experts, (std::vector<int32_t>{3, 1}));
}

TEST(SigmoidRoutingTest, MaskedExpertsCountAsZeroAsTransformersMasks) {
  // Every choice value is 0.5 - 1 = -0.5; the groups tie and the first stays. transformers fills
  // the other group's choices with 0.0, which beats -0.5: expert 2 is chosen (transformers
  // 4.57.1's Glm4MoeTopkRouter.get_topk_indices gives [[2]] on this row, and [[3, 2]] on the
  // groups row above).
  const std::vector<float> logits = {0.0f, 0.0f, 0.0f, 0.0f};
  const std::vector<float> bias = {-1.0f, -1.0f, -1.0f, -1.0f};
  SigmoidRouting r =
      SigmoidRoute(logits, bias, {.num_experts = 4, .top_k = 1, .num_groups = 2, .topk_groups = 1});
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2}));
}

TEST(SigmoidRoutingTest, ANanLogitRanksLast) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logits = {nan, 0.2f, nan, -0.3f, 0.1f, nan};
  SigmoidRouting r = SigmoidRoute(logits, {}, {.num_experts = 6, .top_k = 3});
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 4, 3}));
  for (float w : r.weights) EXPECT_TRUE(std::isfinite(w));
}

}  // namespace
}  // namespace sy
