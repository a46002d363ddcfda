// ScoreChunk against figures worked out by hand (inference/perplexity.h).
#include "inference/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace sy {
namespace {

TEST(PerplexityTest, UniformLogitsHaveThePerplexityOfTheVocabulary) {
  const int64_t vocab = 7;
  const std::vector<int32_t> chunk = {1, 2, 3, 4, 5, 6};
  std::vector<float> logits(chunk.size() * vocab, 0.25f);
  QualityReport report;
  ScoreChunk(logits, {}, vocab, chunk, 0, &report);
  EXPECT_EQ(report.scored, 5);
  EXPECT_NEAR(report.perplexity(), 7.0, 1e-12);
  EXPECT_FALSE(report.has_reference);
}

TEST(PerplexityTest, OnlyPositionsFromFirstOnAreScored) {
  const int64_t vocab = 4;
  const std::vector<int32_t> chunk = {0, 1, 2, 3};
  std::vector<float> logits(chunk.size() * vocab, 0.0f);
  QualityReport report;
  ScoreChunk(logits, {}, vocab, chunk, 2, &report);
  EXPECT_EQ(report.scored, 1);  // position 2 predicts token 3; position 3 predicts nothing
}

TEST(PerplexityTest, KlAndAgreementOfTwoTokenDistributions) {
  // Model: logits (0, log 3) -> p = (1/4, 3/4). Reference: (log 3, 0) -> q = (3/4, 1/4).
  const int64_t vocab = 2;
  const std::vector<int32_t> chunk = {0, 1};
  const std::vector<float> logits = {0.0f, std::log(3.0f), 0.0f, 0.0f};
  const std::vector<float> reference = {std::log(3.0f), 0.0f, 0.0f, 0.0f};
  QualityReport report;
  report.has_reference = true;
  ScoreChunk(logits, reference, vocab, chunk, 0, &report);
  ASSERT_EQ(report.scored, 1);
  // The next token is 1: -log(3/4) under the model, -log(1/4) under the reference.
  EXPECT_NEAR(report.nll_sum, -std::log(0.75), 1e-7);
  EXPECT_NEAR(report.reference_nll_sum, -std::log(0.25), 1e-7);
  // KL(q || p) = 3/4 log((3/4)/(1/4)) + 1/4 log((1/4)/(3/4)) = 1/2 log 3.
  EXPECT_NEAR(report.mean_kl(), 0.5 * std::log(3.0), 1e-7);
  EXPECT_NEAR(report.kl_max, 0.5 * std::log(3.0), 1e-7);
  EXPECT_EQ(report.top1_agree, 0);  // argmax 1 against argmax 0
  EXPECT_EQ(report.top1_agreement(), 0.0);
}

TEST(PerplexityTest, AModelAgainstItselfDivergesByNothing) {
  const int64_t vocab = 5;
  const std::vector<int32_t> chunk = {4, 0, 3, 1};
  std::vector<float> logits;
  for (size_t i = 0; i < chunk.size() * vocab; ++i) logits.push_back(std::sin(float(i)) * 3);
  QualityReport report;
  report.has_reference = true;
  ScoreChunk(logits, logits, vocab, chunk, 0, &report);
  EXPECT_EQ(report.scored, 3);
  EXPECT_EQ(report.kl_sum, 0.0);
  EXPECT_EQ(report.top1_agreement(), 1.0);
  EXPECT_DOUBLE_EQ(report.perplexity(), report.reference_perplexity());
}

}  // namespace
}  // namespace sy
