// Sampler and StopCondition. The oracles are computed here independently: argmax by a plain scan,
// top-k sets by sorting, nuclei by HF's own rule (sort ascending, drop while the cumulative mass
// from below is <= 1 - top_p), and probabilities as softmax(logits / T) in long double.
#include "inference/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace sy {
namespace {

Sampler MakeSampler(float temperature, int32_t top_k, float top_p, uint64_t seed = 7,
                    int num_sequences = 1) {
  SamplerOptions o;
  o.temperature = temperature;
  o.top_k = top_k;
  o.top_p = top_p;
  o.seed = seed;
  auto s = Sampler::Create(o, num_sequences);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

std::vector<long double> Softmax(const std::vector<float>& logits, double temperature) {
  long double max = *std::max_element(logits.begin(), logits.end());
  std::vector<long double> p(logits.size());
  long double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = std::exp((logits[i] - max) / static_cast<long double>(temperature));
    total += p[i];
  }
  for (auto& x : p) x /= total;
  return p;
}

// HF TopPLogitsWarper on probabilities: tokens sorted ascending; drop those whose cumulative
// probability (including themselves) is <= 1 - top_p; never drop the most likely one.
std::set<int32_t> HfNucleus(const std::vector<long double>& probs, double top_p) {
  std::vector<int32_t> order(probs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return probs[a] < probs[b]; });
  std::set<int32_t> keep;
  long double cumulative = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    cumulative += probs[order[i]];
    if (!(cumulative <= 1 - top_p) || i + 1 == order.size()) keep.insert(order[i]);
  }
  return keep;
}

std::vector<float> RandomLogits(size_t n, uint64_t seed, float scale = 2.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(SamplerOptionsTest, RejectsBadFieldsByName) {
  struct Case {
    void (*mutate)(SamplerOptions&);
    const char* field;
  };
  const Case cases[] = {
      {[](SamplerOptions& o) { o.temperature = -1.0f; }, "temperature"},
      {[](SamplerOptions& o) { o.temperature = std::numeric_limits<float>::quiet_NaN(); },
       "temperature"},
      {[](SamplerOptions& o) { o.top_k = -3; }, "top_k"},
      {[](SamplerOptions& o) { o.top_p = 0.0f; }, "top_p"},
      {[](SamplerOptions& o) { o.top_p = 1.5f; }, "top_p"},
      {[](SamplerOptions& o) { o.max_new_tokens = 0; }, "max_new_tokens"},
      {[](SamplerOptions& o) { o.min_p = 1.5f; }, "min_p"},
      {[](SamplerOptions& o) { o.repetition_penalty = 0.0f; }, "repetition_penalty"},
      {[](SamplerOptions& o) { o.presence_penalty = 2.5f; }, "presence_penalty"},
      {[](SamplerOptions& o) { o.frequency_penalty = -3.0f; }, "frequency_penalty"},
      {[](SamplerOptions& o) {
         o.stop_tokens = {2, -1};
       },
       "stop_tokens"},
  };
  for (const Case& c : cases) {
    SamplerOptions o;
    c.mutate(o);
    auto s = Sampler::Create(o, 1);
    ASSERT_FALSE(s.ok()) << c.field;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(c.field), std::string::npos) << s.status().message();
  }
  EXPECT_FALSE(Sampler::Create(SamplerOptions{}, 0).ok());
}

TEST(SamplerTest, GreedyPicksArgmaxLowestIndexOnTies) {
  EXPECT_EQ(GreedyArgmax(std::vector<float>{1, 5, 3, 5, 2}), 1);
  EXPECT_EQ(GreedyArgmax(std::vector<float>{-1, -1, -1}), 0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(GreedyArgmax(std::vector<float>{nan, 2, nan, 7, 7}), 3);
  Sampler greedy = MakeSampler(0.0f, 0, 1.0f);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::vector<float> logits = RandomLogits(1000, seed);
    // Plant a tie for the maximum at two positions.
    float max = *std::max_element(logits.begin(), logits.end()) + 1.0f;
    size_t a = seed * 37 % 1000, b = (seed * 37 + 500) % 1000;
    logits[a] = logits[b] = max;
    EXPECT_EQ(greedy.Sample(0, logits), static_cast<int32_t>(std::min(a, b)));
  }
  // top_k = 1 at temperature 1 is greedy too, ties included.
  Sampler top1 = MakeSampler(1.0f, 1, 1.0f);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(top1.Sample(0, std::vector<float>{0, 3, 1, 3}), 1);
}

TEST(SamplerTest, TopKNeverLeavesTheTopK) {
  const int32_t k = 5;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    std::vector<float> logits = RandomLogits(1000, seed, 1.0f);
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t x, int32_t y) { return logits[x] > logits[y]; });
    std::set<int32_t> top(order.begin(), order.begin() + k);
    Sampler s = MakeSampler(2.0f, k, 1.0f, seed);  // a high temperature flattens the top k
    std::set<int32_t> seen;
    for (int i = 0; i < 2000; ++i) {
      int32_t token = s.Sample(0, logits);
      ASSERT_TRUE(top.count(token)) << "token " << token << " is outside the top " << k;
      seen.insert(token);
    }
    EXPECT_EQ(seen, top);  // and every one of the k can come out
  }
  // Exactly k survive a tie at the boundary: the lower ids.
  std::vector<float> tied = {5, 1, 1, 1, 1, 0};
  Sampler s = MakeSampler(1.0f, 3, 1.0f);
  std::set<int32_t> seen;
  for (int i = 0; i < 3000; ++i) seen.insert(s.Sample(0, tied));
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2}));
}

TEST(SamplerTest, TopPNeverLeavesTheNucleus) {
  const double temperature = 1.3;
  const float top_p = 0.7f;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    std::vector<float> logits = RandomLogits(50, 100 + seed, 1.0f);
    std::set<int32_t> nucleus = HfNucleus(Softmax(logits, temperature), top_p);
    ASSERT_GT(nucleus.size(), 1u);
    ASSERT_LT(nucleus.size(), logits.size());
    Sampler s = MakeSampler(static_cast<float>(temperature), 0, top_p, seed);
    std::set<int32_t> seen;
    for (int i = 0; i < 20000; ++i) {
      int32_t token = s.Sample(0, logits);
      ASSERT_TRUE(nucleus.count(token)) << "token " << token << " is outside the nucleus";
      seen.insert(token);
    }
    EXPECT_EQ(seen, nucleus) << "seed " << seed;
  }
  // A dominant token is kept alone, and a tiny top_p still keeps one token.
  Sampler tiny = MakeSampler(1.0f, 0, 0.01f);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(tiny.Sample(0, std::vector<float>{0, 10, 0}), 1);
}

TEST(SamplerTest, FixedSeedIsReproducibleAndRowsAreIndependent) {
  std::vector<float> logits = RandomLogits(100, 3, 1.0f);
  Sampler a = MakeSampler(1.0f, 20, 0.9f, 42, 2);
  Sampler b = MakeSampler(1.0f, 20, 0.9f, 42, 2);
  Sampler other_seed = MakeSampler(1.0f, 20, 0.9f, 43, 1);
  std::vector<int32_t> a1, b1, c1;
  for (int i = 0; i < 500; ++i) {
    // `a` interleaves sequence 0 between draws of sequence 1; `b` never touches sequence 0.
    a.Sample(0, logits);
    a1.push_back(a.Sample(1, logits));
    b1.push_back(b.Sample(1, logits));
    c1.push_back(other_seed.Sample(0, logits));
  }
  EXPECT_EQ(a1, b1);
  // Sequence 1 of seed 42 starts from seed 43, like sequence 0 of a sampler seeded 43.
  EXPECT_EQ(a1, c1);
  Sampler d = MakeSampler(1.0f, 20, 0.9f, 42, 1);
  std::vector<int32_t> d0;
  for (int i = 0; i < 500; ++i) d0.push_back(d.Sample(0, logits));
  EXPECT_NE(d0, a1);
  // Reseed restarts a slot from a request's own seed.
  Sampler e = MakeSampler(1.0f, 20, 0.9f, 1000, 3);
  e.Reseed(2, 42);
  std::vector<int32_t> e2;
  for (int i = 0; i < 500; ++i) e2.push_back(e.Sample(2, logits));
  EXPECT_EQ(e2, d0);
}

TEST(SamplerTest, BatchSamplesEachRowWithItsSequence) {
  const int64_t vocab = 64;
  std::vector<float> block;
  for (int r = 0; r < 3; ++r) {
    std::vector<float> row = RandomLogits(vocab, 50 + r, 1.0f);
    block.insert(block.end(), row.begin(), row.end());
  }
  Sampler batch = MakeSampler(0.8f, 10, 0.95f, 5, 3);
  Sampler single = MakeSampler(0.8f, 10, 0.95f, 5, 3);
  for (int step = 0; step < 50; ++step) {
    std::vector<int32_t> tokens(3);
    batch.SampleBatch(block, vocab, tokens);
    for (int r = 0; r < 3; ++r) {
      std::span<const float> row(block.data() + r * vocab, vocab);
      EXPECT_EQ(tokens[r], single.Sample(r, row));
    }
  }
}

// Empirical frequencies of `draws` samples, and the largest |frequency - p| over tokens.
double MaxAbsError(Sampler& s, const std::vector<float>& logits,
                   const std::vector<long double>& probs, int draws, double* chi_square) {
  std::vector<int64_t> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) ++counts[s.Sample(0, logits)];
  double worst = 0;
  *chi_square = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    double p = static_cast<double>(probs[i]);
    worst = std::max(worst, std::abs(static_cast<double>(counts[i]) / draws - p));
    if (p > 0) {
      double expected = p * draws;
      *chi_square += (counts[i] - expected) * (counts[i] - expected) / expected;
    } else {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
    }
  }
  return worst;
}

TEST(SamplerTest, TemperatureDistributionMatchesSoftmax) {
  // 200k draws: a token's frequency has standard deviation <= sqrt(0.25 / 200000) = 0.0011, so
  // 0.005 is a 4.5-sigma bound. The chi-square bound 23.5 is its 0.9999 quantile at 4 degrees of
  // freedom. A wrong temperature shifts some probability by far more than 0.005 (checked below).
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f};
  const double temperature = 0.7;
  const int draws = 200000;
  const double bound = 0.005;
  std::vector<long double> probs = Softmax(logits, temperature);
  for (double wrong : {0.5, 0.6, 0.8, 1.0}) {
    std::vector<long double> other = Softmax(logits, wrong);
    double gap = 0;
    for (size_t i = 0; i < probs.size(); ++i) {
      gap = std::max(gap, static_cast<double>(std::abs(probs[i] - other[i])));
    }
    EXPECT_GT(gap, 4 * bound) << "the test could not tell temperature " << wrong;
  }
  Sampler s = MakeSampler(static_cast<float>(temperature), 0, 1.0f, 2024);
  double chi_square = 0;
  double worst = MaxAbsError(s, logits, probs, draws, &chi_square);
  EXPECT_LT(worst, bound);
  EXPECT_LT(chi_square, 23.5);
}

TEST(SamplerTest, WarpersApplyInHuggingFaceOrder) {
  const int draws = 100000;
  double chi_square = 0;
  {
    // Temperature before top-p: at T = 2 the nucleus of mass 0.8 is {0, 1, 2}; had top-p run on
    // the untempered logits it would be {0, 1} and token 2 would never appear.
    const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
    std::vector<long double> probs = Softmax(logits, 2.0);
    ASSERT_EQ(HfNucleus(probs, 0.8), (std::set<int32_t>{0, 1, 2}));
    ASSERT_EQ(HfNucleus(Softmax(logits, 1.0), 0.8), (std::set<int32_t>{0, 1}));
    long double kept = probs[0] + probs[1] + probs[2];
    std::vector<long double> want = {probs[0] / kept, probs[1] / kept, probs[2] / kept, 0};
    Sampler s = MakeSampler(2.0f, 0, 0.8f, 11);
    EXPECT_LT(MaxAbsError(s, logits, want, draws, &chi_square), 0.007);
    EXPECT_LT(chi_square, 21.1);  // 0.9999 quantile, 3 degrees of freedom (token 3 has p = 0)
  }
  {
    // Top-k before top-p: after top-2 the renormalised masses are about 0.52 / 0.48, so top_p 0.5
    // keeps token 0 alone. Over the full distribution (20 more tokens at logit 0) the nucleus
    // would hold tokens 0, 1 and some of the tail, and top-2 after it would keep 0 and 1.
    std::vector<float> logits = {2.0f, 1.9f};
    logits.resize(22, 0.0f);
    Sampler s = MakeSampler(1.0f, 2, 0.5f, 12);
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(s.Sample(0, logits), 0);
    ASSERT_GT(HfNucleus(Softmax(logits, 1.0), 0.5).size(), 2u);
  }
  {
    // Top-k alone: the frequencies are the renormalised top-3 softmax.
    const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.0f, 1.5f};
    std::vector<long double> probs = Softmax({2.0f, 1.5f, 1.0f}, 1.5);
    std::vector<long double> want = {0, probs[0], 0, probs[2], probs[1]};
    Sampler s = MakeSampler(1.5f, 3, 1.0f, 13);
    EXPECT_LT(MaxAbsError(s, logits, want, draws, &chi_square), 0.007);
    EXPECT_LT(chi_square, 18.5);  // 0.9999 quantile, 2 degrees of freedom
  }
}

TEST(SamplerTest, MinPDropsTokensBelowItsShareOfTheMostLikely) {
  // At T = 1 the probabilities are proportional to e^logit: token 1 is e^-1 = 0.37 and token 2
  // e^-3 = 0.05 of token 0's. min_p 0.1 keeps {0, 1} (renormalised), never 2 or 3.
  const std::vector<float> logits = {2.0f, 1.0f, -1.0f, -4.0f};
  SamplerOptions o;
  o.min_p = 0.1f;
  o.seed = 5;
  Sampler s = std::move(Sampler::Create(o, 1)).value();
  const std::vector<long double> p = Softmax({2.0f, 1.0f}, 1.0);
  double chi_square = 0;
  EXPECT_LT(MaxAbsError(s, logits, {p[0], p[1], 0, 0}, 100000, &chi_square), 0.007);
  EXPECT_LT(chi_square, 15.2);  // 0.9999 quantile, 1 degree of freedom (tokens 2, 3: p = 0)
  // min_p 0.04 lets token 2 back in.
  o.min_p = 0.04f;
  Sampler looser = std::move(Sampler::Create(o, 1)).value();
  std::set<int32_t> seen;
  for (int i = 0; i < 20000; ++i) seen.insert(looser.Sample(0, logits));
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2}));
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogitsOfSeenTokens) {
  // Greedy, as Hugging Face's RepetitionPenaltyLogitsProcessor: the prompt holds tokens 0 and 2.
  // Penalty 2: token 0's 3.0 -> 1.5, below token 1's 2.0, which wins; a negative logit of a
  // seen token is multiplied, so it falls further.
  SamplerOptions o;
  o.temperature = 0.0f;
  o.repetition_penalty = 2.0f;
  Sampler s = std::move(Sampler::Create(o, 1)).value();
  s.StartSequence(0, std::vector<int32_t>{0, 2, 0});
  EXPECT_EQ(s.Sample(0, std::vector<float>{3.0f, 2.0f, -0.5f, -0.6f}), 1);
  // Token 1 is in the answer now: 2.0 -> 1.0, below token 0's 1.5 (penalized once, not twice
  // for appearing twice in the prompt).
  EXPECT_EQ(s.Sample(0, std::vector<float>{3.0f, 2.0f, -0.5f, -0.6f}), 0);
  // Token 2 (-0.5 -> -1.0) loses to token 3 (-0.6, never seen) when they lead.
  EXPECT_EQ(s.Sample(0, std::vector<float>{-9.0f, -9.0f, -0.5f, -0.6f}), 3);
  // A new answer forgets the old one's tokens; without StartSequence nothing is penalized.
  s.StartSequence(0, {});
  EXPECT_EQ(s.Sample(0, std::vector<float>{3.0f, 2.0f, -0.5f, -0.6f}), 0);
}

TEST(SamplerTest, PresenceAndFrequencyPenaltiesCountTheAnswerOnly) {
  // OpenAI's formula: logit - frequency x count - presence x (count > 0), over the answer's
  // tokens; the prompt's do not count.
  SamplerOptions o;
  o.temperature = 0.0f;
  o.presence_penalty = 0.5f;
  o.frequency_penalty = 0.3f;
  Sampler s = std::move(Sampler::Create(o, 1)).value();
  s.StartSequence(0, std::vector<int32_t>{1});
  const std::vector<float> logits = {2.0f, 1.5f, 0.0f};
  EXPECT_EQ(s.Sample(0, logits), 0);  // nothing in the answer yet; the prompt's token 1 is free
  // Token 0 once: 2.0 - 0.3 - 0.5 = 1.2 < 1.5.
  EXPECT_EQ(s.Sample(0, logits), 1);
  // Tokens 0 and 1 once each: 1.2 against 1.5 - 0.8 = 0.7.
  EXPECT_EQ(s.Sample(0, logits), 0);
  // Token 0 twice: 2.0 - 0.6 - 0.5 = 0.9 against 0.7.
  EXPECT_EQ(s.Sample(0, logits), 0);
  // Token 0 three times: 2.0 - 0.9 - 0.5 = 0.6 < 0.7.
  EXPECT_EQ(s.Sample(0, logits), 1);
}

TEST(SamplerTest, LogitBiasAddsToTheListedTokens) {
  SamplerOptions o;
  o.temperature = 0.0f;
  o.logit_bias = {{2, 5.0f}, {0, -100.0f}};
  Sampler s = std::move(Sampler::Create(o, 1)).value();
  // 1.0 + 5 beats 3.0 (token 0, which -100 also removes); token 1 stays at 2.0.
  EXPECT_EQ(s.Sample(0, std::vector<float>{3.0f, 2.0f, 1.0f}), 2);
  o.logit_bias = {{1, 101.0f}};
  EXPECT_FALSE(Sampler::Create(o, 1).ok());
  o.logit_bias = {{-1, 1.0f}};
  EXPECT_FALSE(Sampler::Create(o, 1).ok());
}

TEST(SamplerTest, InfiniteAndNanLogits) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Sampler s = MakeSampler(1.0f, 0, 1.0f, 3);
  std::set<int32_t> seen;
  for (int i = 0; i < 1000; ++i) {
    int32_t t = s.Sample(0, std::vector<float>{nan, -inf, 1.0f, nan, 1.0f});
    ASSERT_TRUE(t == 2 || t == 4) << t;
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), 2u);
  for (int i = 0; i < 100; ++i) {
    int32_t t = s.Sample(0, std::vector<float>{1.0f, inf, 3.0f, inf});
    ASSERT_TRUE(t == 1 || t == 3) << t;
  }
  EXPECT_DEATH(s.Sample(0, std::vector<float>{nan, -inf}), "no distribution");
}

TEST(StopConditionTest, StopsOnStopTokenOrLength) {
  SamplerOptions o;
  o.max_new_tokens = 4;
  o.stop_tokens = {7, 2, 7};
  auto stop = StopCondition::Create(o);
  ASSERT_TRUE(stop.ok());
  EXPECT_EQ(stop->Append(5), StopReason::kNone);
  EXPECT_EQ(stop->Append(2), StopReason::kStopToken);
  EXPECT_TRUE(stop->stopped());
  EXPECT_EQ(stop->generated(), 2);
  stop->Reset();
  EXPECT_EQ(stop->Append(1), StopReason::kNone);
  EXPECT_EQ(stop->Append(1), StopReason::kNone);
  EXPECT_EQ(stop->Append(1), StopReason::kNone);
  EXPECT_EQ(stop->Append(1), StopReason::kMaxTokens);
  EXPECT_EQ(stop->generated(), 4);
  stop->Reset();
  for (int i = 0; i < 3; ++i) stop->Append(0);
  EXPECT_EQ(stop->Append(7), StopReason::kStopToken);  // the stop token wins at the limit
  EXPECT_DEATH(stop->Append(0), "after the sequence stopped");
  o.max_new_tokens = 0;
  auto bad = StopCondition::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_new_tokens"), std::string::npos);
}

}  // namespace
}  // namespace sy
