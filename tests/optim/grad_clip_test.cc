// ClipGradNorm / GlobalGradNorm against norms computed here in long double, plus the clipping
// rule of torch.nn.utils.clip_grad_norm_ (coef = max_norm / (norm + 1e-6), applied when < 1).
#include "optim/grad_clip.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace sy {
namespace {

std::vector<std::vector<float>> RandomGrads(const std::vector<size_t>& sizes, float scale,
                                            uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<std::vector<float>> grads;
  for (size_t n : sizes) {
    grads.emplace_back(n);
    for (float& x : grads.back()) x = dist(rng);
  }
  return grads;
}

std::vector<std::span<float>> Spans(std::vector<std::vector<float>>& grads) {
  return {grads.begin(), grads.end()};
}

long double ExactNorm(const std::vector<std::vector<float>>& grads) {
  long double sum = 0;
  for (const auto& g : grads) {
    for (float x : g) sum += static_cast<long double>(x) * x;
  }
  return std::sqrt(sum);
}

TEST(GradClipTest, NormMatchesLongDoubleOverManyBuffers) {
  auto grads = RandomGrads({1, 7, 70001, 131072, 0, 5}, 0.3f, 1);
  ThreadPool pool(3);
  auto spans = Spans(grads);
  long double want = ExactNorm(grads);
  float serial = GlobalGradNorm(spans, nullptr);
  float parallel = GlobalGradNorm(spans, &pool);
  EXPECT_NEAR(serial, static_cast<double>(want), 1e-6 * static_cast<double>(want));
  EXPECT_EQ(serial, parallel);  // fixed chunking: bitwise independent of threads
}

TEST(GradClipTest, ClipsToMaxNormAndReturnsThePreClipNorm) {
  auto grads = RandomGrads({100, 70001}, 0.05f, 2);
  auto original = grads;
  auto spans = Spans(grads);
  ThreadPool pool(2);
  const float max_norm = 1.0f;
  float norm = ClipGradNorm(spans, max_norm, &pool);
  double want_norm = static_cast<double>(ExactNorm(original));
  ASSERT_GT(want_norm, 2.0);  // the test data must actually need clipping
  EXPECT_NEAR(norm, want_norm, 1e-6 * want_norm);
  float coef = max_norm / (norm + 1e-6f);
  for (size_t b = 0; b < grads.size(); ++b) {
    for (size_t i = 0; i < grads[b].size(); ++i) {
      ASSERT_EQ(grads[b][i], original[b][i] * coef) << b << "," << i;
    }
  }
  EXPECT_NEAR(static_cast<double>(ExactNorm(grads)), 1.0, 2e-6);
}

TEST(GradClipTest, LeavesSmallGradientsUntouched) {
  auto grads = RandomGrads({1000, 33}, 0.001f, 3);
  auto original = grads;
  auto spans = Spans(grads);
  float norm = ClipGradNorm(spans, 1.0f, nullptr);
  EXPECT_LT(norm, 1.0f);
  EXPECT_EQ(grads, original);
}

TEST(GradClipTest, NonFiniteNormIsReturnedAndGradientsAreLeftAlone) {
  for (float bad : {INFINITY, NAN}) {
    auto grads = RandomGrads({64, 17}, 1.0f, 4);
    grads[1][16] = bad;
    auto spans = Spans(grads);
    std::vector<float> before = grads[0];
    float norm = ClipGradNorm(spans, 1.0f, nullptr);
    EXPECT_FALSE(std::isfinite(norm));
    EXPECT_EQ(grads[0], before);
  }
}

}  // namespace
}  // namespace sy
