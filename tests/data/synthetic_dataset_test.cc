// Tests of the synthetic multi-task data: every answer is checked against an independent
// computation, the splits never share an input, and the mixture follows the weights.
#include "runtime/data/synthetic_dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <vector>

namespace sy {
namespace {

constexpr int64_t kSeqLen = 48;

std::unique_ptr<SyntheticDataset> Make(uint64_t seed = 5, double eval_fraction = 0.2,
                                       std::array<double, 5> weights = {1, 1, 1, 1, 1},
                                       SyntheticOptions options = {}) {
  auto dataset = SyntheticDataset::Create(options, kSeqLen, seed, eval_fraction, weights);
  SY_CHECK(dataset.ok()) << dataset.status().ToString();
  return std::move(dataset).value();
}

// One example split into its parts, read back from tokens and targets only.
struct Parsed {
  int task = -1;
  std::vector<int32_t> input;   // between the tag and SEP
  std::vector<int32_t> answer;  // the scored targets, EOS included
};

Parsed ParseRow(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets) {
  Parsed p;
  p.task = tokens[0] - kTaskTagBase;
  size_t t = 1;
  while (t < tokens.size() && tokens[t] != kSep) p.input.push_back(tokens[t++]);
  EXPECT_LT(t, tokens.size()) << "no SEP";
  const size_t sep = t;
  for (size_t i = 0; i < targets.size(); ++i) {
    if (i + 1 <= sep) {
      EXPECT_EQ(targets[i], kIgnoreTarget) << "prompt position " << i << " is scored";
    }
    if (targets[i] != kIgnoreTarget) p.answer.push_back(targets[i]);
  }
  // The scored targets are the answer, in place: target i predicts token i + 1.
  for (size_t k = 0; k < p.answer.size(); ++k) {
    EXPECT_EQ(targets[sep + k], p.answer[k]);
    if (sep + k + 1 < tokens.size()) {
      EXPECT_EQ(tokens[sep + k + 1], p.answer[k]);
    }
  }
  for (size_t i = sep + p.answer.size() + 1; i < tokens.size(); ++i) {
    EXPECT_EQ(tokens[i], kPad) << "padding at " << i;
  }
  return p;
}

std::vector<int32_t> Digits(int64_t value, int width) {
  std::vector<int32_t> digits(width);
  for (int d = width - 1; d >= 0; --d) {
    digits[d] = DigitToken(static_cast<int>(value % 10));
    value /= 10;
  }
  return digits;
}

// The expected answer (EOS included) of a non-Markov task, computed here from scratch.
std::vector<int32_t> ExpectedAnswer(int task, const std::vector<int32_t>& input, int modulus) {
  std::vector<int32_t> answer;
  switch (task) {
    case 0:
      answer = input;
      break;
    case 1:
      answer.assign(input.rbegin(), input.rend());
      break;
    case 2:
      answer = input;
      std::sort(answer.begin(), answer.end());
      break;
    case 3: {
      const auto plus = std::find(input.begin(), input.end(), kPlus);
      EXPECT_NE(plus, input.end());
      auto number = [](auto begin, auto end) {
        int64_t v = 0;
        for (auto it = begin; it != end; ++it) {
          EXPECT_GE(*it, kFirstSymbol);
          EXPECT_LT(*it, kFirstSymbol + 10);
          v = v * 10 + (*it - kFirstSymbol);
        }
        return v;
      };
      const int64_t a = number(input.begin(), plus);
      const int64_t b = number(plus + 1, input.end());
      EXPECT_LT(a, modulus);
      EXPECT_LT(b, modulus);
      answer = Digits((a + b) % modulus, static_cast<int>(plus - input.begin()));
      break;
    }
    default:
      ADD_FAILURE() << "no closed-form answer for task " << task;
  }
  answer.push_back(kEos);
  return answer;
}

Parsed GetParsed(const SyntheticDataset& d, Split split, int64_t index, int32_t* task_id) {
  std::vector<int32_t> tokens(kSeqLen), targets(kSeqLen);
  Result<int32_t> task = d.Get(split, index, tokens, targets);
  SY_CHECK(task.ok()) << task.status().ToString();
  *task_id = *task;
  for (int32_t token : tokens) {
    EXPECT_GE(token, 0);
    EXPECT_LT(token, d.vocab_size());
  }
  return ParseRow(tokens, targets);
}

TEST(SyntheticDatasetTest, EveryAnswerIsCorrect) {
  auto dataset = Make();
  const SyntheticOptions& o = dataset->options();
  std::array<int, 5> seen{};
  for (Split split : {Split::kTrain, Split::kEval}) {
    for (int64_t i = 0; i < 2000; ++i) {
      int32_t task_id = -1;
      Parsed p = GetParsed(*dataset, split, i, &task_id);
      ASSERT_EQ(p.task, task_id) << "the tag names the task";
      ASSERT_GE(task_id, 0);
      ASSERT_LT(task_id, 5);
      ++seen[task_id];
      if (task_id <= 2) {
        EXPECT_GE(static_cast<int>(p.input.size()), o.min_len);
        EXPECT_LE(static_cast<int>(p.input.size()), o.max_len);
        for (int32_t token : p.input) {
          EXPECT_GE(token, kFirstSymbol);
          EXPECT_LT(token, kFirstSymbol + o.num_symbols);
        }
      }
      if (task_id <= 3) {
        EXPECT_EQ(p.answer, ExpectedAnswer(task_id, p.input, o.modulus)) << "example " << i;
      } else {
        // Markov: every step of the walk, input and answer, is a transition of the chain.
        ASSERT_EQ(static_cast<int>(p.input.size()), o.markov_prefix_len);
        ASSERT_EQ(static_cast<int>(p.answer.size()), o.markov_answer_len + 1);
        EXPECT_EQ(p.answer.back(), kEos);
        std::vector<int32_t> walk = p.input;
        walk.insert(walk.end(), p.answer.begin(), p.answer.end() - 1);
        for (size_t k = 0; k + 1 < walk.size(); ++k) {
          EXPECT_GT(dataset->markov_chain().Probability(walk[k] - kFirstSymbol,
                                                        walk[k + 1] - kFirstSymbol),
                    0.0)
              << "step " << k << " of example " << i;
        }
      }
    }
  }
  for (int t = 0; t < 5; ++t) EXPECT_GT(seen[t], 100) << kSyntheticTaskNames[t];
}

TEST(SyntheticDatasetTest, ModAddCoversCarriesAndWraps) {
  SyntheticOptions options;
  options.modulus = 1000;
  auto dataset = Make(9, 0.1, {0, 0, 0, 1, 0}, options);
  EXPECT_EQ(dataset->modadd_width(), 3);
  bool wrapped = false;
  for (int64_t i = 0; i < 500; ++i) {
    int32_t task = -1;
    Parsed p = GetParsed(*dataset, Split::kTrain, i, &task);
    ASSERT_EQ(task, 3);
    ASSERT_EQ(p.input.size(), 7u);
    EXPECT_EQ(p.answer, ExpectedAnswer(3, p.input, 1000));
    int64_t a = 0, b = 0;
    for (int d = 0; d < 3; ++d) {
      a = a * 10 + p.input[d] - kFirstSymbol;
      b = b * 10 + p.input[4 + d] - kFirstSymbol;
    }
    wrapped = wrapped || a + b >= 1000;
  }
  EXPECT_TRUE(wrapped);
}

TEST(SyntheticDatasetTest, Deterministic) {
  auto a = Make(11);
  auto b = Make(11);
  auto c = Make(12);
  std::vector<int32_t> ta(kSeqLen), ga(kSeqLen), tb(kSeqLen), gb(kSeqLen), tc(kSeqLen), gc(kSeqLen);
  int differ = 0;
  for (int64_t i = 0; i < 200; ++i) {
    ASSERT_TRUE(a->Get(Split::kTrain, i, ta, ga).ok());
    ASSERT_TRUE(b->Get(Split::kTrain, i, tb, gb).ok());
    ASSERT_TRUE(c->Get(Split::kTrain, i, tc, gc).ok());
    EXPECT_EQ(ta, tb);
    EXPECT_EQ(ga, gb);
    differ += ta != tc ? 1 : 0;
  }
  // Out of order access gives the same example.
  ASSERT_TRUE(a->Get(Split::kTrain, 57, ta, ga).ok());
  ASSERT_TRUE(b->Get(Split::kTrain, 3, tb, gb).ok());
  ASSERT_TRUE(b->Get(Split::kTrain, 57, tb, gb).ok());
  EXPECT_EQ(ta, tb);
  EXPECT_GT(differ, 150) << "another seed gives other examples";
}

TEST(SyntheticDatasetTest, SplitsNeverShareAnInput) {
  SyntheticOptions options;
  options.num_symbols = 10;  // a small input space, so collisions would surely show
  options.min_len = 1;
  options.max_len = 3;
  options.modulus = 23;
  options.markov_prefix_len = 2;
  auto dataset = Make(3, 0.3, {1, 1, 1, 1, 1}, options);
  std::array<std::set<std::vector<int32_t>>, 2> inputs;
  std::array<std::set<std::vector<int32_t>>, 5> train_by_task;
  std::array<std::set<std::vector<int32_t>>, 5> eval_by_task;
  for (Split split : {Split::kTrain, Split::kEval}) {
    for (int64_t i = 0; i < 4000; ++i) {
      int32_t task = -1;
      Parsed p = GetParsed(*dataset, split, i, &task);
      auto& by_task = split == Split::kTrain ? train_by_task : eval_by_task;
      by_task[task].insert(p.input);
      EXPECT_EQ(dataset->IsEvalInput(static_cast<SyntheticTask>(task), p.input),
                split == Split::kEval);
    }
  }
  for (int t = 0; t < 5; ++t) {
    ASSERT_FALSE(eval_by_task[t].empty()) << kSyntheticTaskNames[t];
    for (const auto& input : eval_by_task[t]) {
      EXPECT_EQ(train_by_task[t].count(input), 0u)
          << "task " << kSyntheticTaskNames[t] << ": an eval input appears in training";
    }
  }
  // Roughly eval_fraction of the copy inputs (10 + 100 + 1000 of them) are held out.
  const double held_out = static_cast<double>(eval_by_task[0].size()) /
                          static_cast<double>(eval_by_task[0].size() + train_by_task[0].size());
  EXPECT_GT(held_out, 0.15);
  EXPECT_LT(held_out, 0.45);
}

TEST(SyntheticDatasetTest, MixtureFollowsWeights) {
  const std::array<double, 5> weights = {4, 0, 1, 2, 3};
  auto dataset = Make(21, 0.1, weights);
  constexpr int kExamples = 20000;
  std::array<int, 5> counts{};
  std::vector<int32_t> tokens(kSeqLen), targets(kSeqLen);
  for (int64_t i = 0; i < kExamples; ++i) {
    Result<int32_t> task = dataset->Get(Split::kTrain, i, tokens, targets);
    ASSERT_TRUE(task.ok());
    ++counts[*task];
  }
  EXPECT_EQ(counts[1], 0) << "a zero-weight task is never drawn";
  for (int t = 0; t < 5; ++t) {
    const double p = weights[t] / 10.0;
    const double sigma = std::sqrt(kExamples * p * (1 - p));
    EXPECT_NEAR(counts[t], kExamples * p, 5 * sigma + 1) << kSyntheticTaskNames[t];
  }
}

TEST(SyntheticDatasetTest, EvalSplitIsTaskBalancedWhateverTheWeights) {
  auto dataset = Make(2, 0.2, {1, 0, 0, 0, 0});
  std::vector<int32_t> tokens(kSeqLen), targets(kSeqLen);
  for (int64_t i = 0; i < 50; ++i) {
    Result<int32_t> task = dataset->Get(Split::kEval, i, tokens, targets);
    ASSERT_TRUE(task.ok());
    EXPECT_EQ(*task, i % 5);
  }
}

TEST(SyntheticDatasetTest, WeightsCanChangeAndAreSavedAsState) {
  auto dataset = Make();
  ASSERT_TRUE(dataset->SetTaskWeights(std::array<double, 5>{0, 0, 0, 0, 1}).ok());
  std::vector<int32_t> tokens(kSeqLen), targets(kSeqLen);
  for (int64_t i = 0; i < 20; ++i) {
    EXPECT_EQ(*dataset->Get(Split::kTrain, i, tokens, targets), 4);
  }
  const nlohmann::json state = dataset->State();
  auto other = Make();
  ASSERT_TRUE(other->RestoreState(state).ok());
  EXPECT_EQ(other->task_weights(), dataset->task_weights());

  Status negative = dataset->SetTaskWeights(std::array<double, 5>{1, -1, 0, 0, 0});
  EXPECT_NE(negative.message().find("tasks.reverse.weight"), std::string::npos)
      << negative.message();
  EXPECT_FALSE(dataset->SetTaskWeights(std::array<double, 5>{0, 0, 0, 0, 0}).ok());
  EXPECT_FALSE(other->RestoreState(nlohmann::json{{"task_weights", 3}}).ok());
}

TEST(SyntheticDatasetTest, SettingsThatDoNotFitAreRejected) {
  SyntheticOptions options;
  options.max_len = 30;
  auto too_long =
      SyntheticDataset::Create(options, 48, 1, 0.1, std::array<double, 5>{1, 1, 1, 1, 1});
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().message(),
            "'data.synthetic.max_len' must be at most (seq_len - 2) / 2 = 23 so a copy example "
            "(tag, input, SEP, answer, EOS) fits seq_len 48, got 30");

  SyntheticOptions few;
  few.num_symbols = 8;
  EXPECT_FALSE(
      SyntheticDataset::Create(few, 48, 1, 0.1, std::array<double, 5>{1, 1, 1, 1, 1}).ok());
  EXPECT_FALSE(
      SyntheticDataset::Create({}, 48, 1, 0.95, std::array<double, 5>{1, 1, 1, 1, 1}).ok());
}

TEST(SyntheticDatasetTest, NoEvalSplitWhenFractionIsZero) {
  auto dataset = Make(1, 0.0);
  EXPECT_EQ(dataset->size(Split::kEval), 0);
  EXPECT_EQ(dataset->size(Split::kTrain), Dataset::kUnbounded);
  std::vector<int32_t> tokens(kSeqLen), targets(kSeqLen);
  Result<int32_t> task = dataset->Get(Split::kEval, 0, tokens, targets);
  ASSERT_FALSE(task.ok());
  EXPECT_NE(task.status().message().find("data.eval_fraction"), std::string::npos);
}

TEST(SyntheticDatasetTest, VocabularyLayout) {
  auto dataset = Make();
  EXPECT_EQ(dataset->vocab_size(), kFirstSymbol + 16);
  EXPECT_EQ(dataset->num_tasks(), 5);
  EXPECT_EQ(dataset->task_name(3), "modadd");
  EXPECT_EQ(TaskTag(SyntheticTask::kMarkov), 12);
  EXPECT_LT(TaskTag(SyntheticTask::kMarkov), kFirstSymbol);
}

TEST(PackExampleTest, LaysOutTokensAndTargets) {
  std::vector<int32_t> tokens(6), targets(6);
  const std::vector<int32_t> prompt = {8, 20, 21, kSep};
  const std::vector<int32_t> answer = {20, 21, kEos};
  PackExample(prompt, answer, tokens, targets);
  EXPECT_EQ(tokens, (std::vector<int32_t>{8, 20, 21, kSep, 20, 21}));
  EXPECT_EQ(targets, (std::vector<int32_t>{-1, -1, -1, 20, 21, kEos}));
  std::vector<int32_t> tokens8(8), targets8(8);
  PackExample(prompt, answer, tokens8, targets8);
  EXPECT_EQ(tokens8, (std::vector<int32_t>{8, 20, 21, kSep, 20, 21, kEos, kPad}));
  EXPECT_EQ(targets8, (std::vector<int32_t>{-1, -1, -1, 20, 21, kEos, -1, -1}));
}

TEST(MarkovChainTest, RowsAreDistributionsOverDistinctSuccessors) {
  MarkovChain chain(16, 3, 99);
  for (int s = 0; s < 16; ++s) {
    std::set<int32_t> next(chain.Successors(s).begin(), chain.Successors(s).end());
    EXPECT_EQ(next.size(), 3u);
    double total = 0;
    for (double p : chain.Probabilities(s)) {
      EXPECT_GT(p, 0.0);
      total += p;
    }
    EXPECT_NEAR(total, 1.0, 1e-12);
  }
  // Sampling follows the probabilities.
  SampleRng rng(1);
  std::map<int, int> counts;
  constexpr int kDraws = 30000;
  for (int i = 0; i < kDraws; ++i) ++counts[chain.Sample(0, rng)];
  EXPECT_EQ(counts.size(), 3u);
  for (const auto& [to, count] : counts) {
    EXPECT_NEAR(count / double(kDraws), chain.Probability(0, to), 0.02);
  }
  MarkovChain same(16, 3, 99);
  EXPECT_TRUE(std::equal(same.Successors(5).begin(), same.Successors(5).end(),
                         chain.Successors(5).begin()));
}

TEST(SampleRngTest, UniformIsInRangeAndRoughlyFlat) {
  SampleRng rng(42);
  std::array<int, 7> counts{};
  for (int i = 0; i < 70000; ++i) {
    const uint64_t v = rng.Uniform(7);
    ASSERT_LT(v, 7u);
    ++counts[v];
  }
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);
  for (int i = 0; i < 1000; ++i) {
    const double u = rng.UniformDouble();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
  SampleRng a(MixSeed(1, 2)), b(MixSeed(1, 2)), c(MixSeed(2, 1));
  EXPECT_EQ(a.Next(), b.Next());
  EXPECT_NE(SampleRng(MixSeed(1, 2)).Next(), c.Next());
}

}  // namespace
}  // namespace sy
