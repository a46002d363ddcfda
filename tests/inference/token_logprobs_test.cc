// The log-probabilities the server reports (inference/token_logprobs.h), against the log-softmax
// computed by hand.
#include "inference/token_logprobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace sy {
namespace {

TEST(TokenLogprobTest, LogSoftmaxOfTheTokenAndTheTopAlternatives) {
  // e^0 + e^ln2 + e^ln4 + e^-inf = 1 + 2 + 4 = 7: log-probabilities ln(1/7), ln(2/7), ln(4/7).
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(4.0f), ninf};
  TokenLogprob t = ComputeTokenLogprob(logits, 1, 2);
  EXPECT_NEAR(t.logprob, std::log(2.0 / 7.0), 1e-6);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].first, 2);
  EXPECT_NEAR(t.top[0].second, std::log(4.0 / 7.0), 1e-6);
  EXPECT_EQ(t.top[1].first, 1);
  EXPECT_NEAR(t.top[1].second, std::log(2.0 / 7.0), 1e-6);
  // A token of probability 0; no alternatives asked for.
  TokenLogprob zero = ComputeTokenLogprob(logits, 3, 0);
  EXPECT_EQ(zero.logprob, ninf);
  EXPECT_TRUE(zero.top.empty());
}

TEST(TokenLogprobTest, TiesGoToTheLowerIdAndNanCountsAsImpossible) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logits = {1.0f, nan, 1.0f, 1.0f};
  TokenLogprob t = ComputeTokenLogprob(logits, 2, 4);
  EXPECT_NEAR(t.logprob, std::log(1.0 / 3.0), 1e-6);
  ASSERT_EQ(t.top.size(), 4u);
  EXPECT_EQ(t.top[0].first, 0);
  EXPECT_EQ(t.top[1].first, 2);
  EXPECT_EQ(t.top[2].first, 3);
  EXPECT_EQ(t.top[3].first, 1);
  EXPECT_TRUE(std::isinf(t.top[3].second) && t.top[3].second < 0);
  // Large logits do not overflow (the maximum is subtracted first).
  TokenLogprob big = ComputeTokenLogprob(std::vector<float>{1000.0f, 1000.0f}, 0, 1);
  EXPECT_NEAR(big.logprob, std::log(0.5), 1e-6);
}

}  // namespace
}  // namespace sy
