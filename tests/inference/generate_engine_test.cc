// GenerateEngine (inference/generate_engine.h), the one generate loop, against an independent
// greedy loop: MoeModel::Forward over the whole sequence at every step, argmax of the last row.
// Also: requests joining and leaving a running batch give each request's own tokens, stop tokens
// and max_new_tokens end a request, a callback cancels one, and bad requests are refused up front.
#include "inference/generate_engine.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "inference/resident_expert_provider.h"
#include "tests/inference/decoder_test_util.h"

namespace sy {
namespace {

ModelConfig Config() {
  ModelConfig c;
  c.vocab_size = 48;
  c.hidden_size = 32;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.intermediate_size = 24;
  c.num_experts = 4;
  c.moe_intermediate_size = 16;
  c.top_k = 2;
  c.first_k_dense = 1;
  return c;
}

// The oracle: n greedy tokens by full forwards, no KV cache.
std::vector<int32_t> GreedyByFullForward(MoeModel& model, std::vector<int32_t> ids, int n) {
  const auto vocab = static_cast<size_t>(model.config().vocab_size);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const std::vector<float> logits = testing::FullLogits(model, ids);
    const int32_t token =
        GreedyArgmax(std::span<const float>(logits.data() + logits.size() - vocab, vocab));
    out.push_back(token);
    ids.push_back(token);
  }
  return out;
}

class GenerateEngineTest : public testing::BackendTest {
 protected:
  void SetUp() override {
    testing::BackendTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    Result<std::unique_ptr<MoeModel>> model = testing::RandomModel(*backend_, Config(), 21);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(model).value();
  }
  std::unique_ptr<MoeModel> model_;
};

TEST_P(GenerateEngineTest, GreedyEqualsFullForwardAndStreamsEveryToken) {
  const std::vector<int32_t> prompt = {5, 17, 2, 40, 9};
  const std::vector<int32_t> want = GreedyByFullForward(*model_, prompt, 7);
  ResidentExpertProvider provider;
  Result<std::unique_ptr<GenerateEngine>> engine =
      GenerateEngine::Create(*model_, &provider, {.max_batch = 1, .max_context = 16});
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  std::vector<int32_t> streamed;
  std::vector<int64_t> indices;
  StopReason last = StopReason::kNone;
  std::vector<float> prompt_logits;
  GenerateRequest request = testing::GreedyRequest(prompt, 7);
  request.prompt_logits = &prompt_logits;
  Result<Generation> g = (*engine)->Generate(request, [&](const TokenEvent& e) {
    streamed.push_back(e.token);
    indices.push_back(e.index);
    last = e.stop;
    EXPECT_EQ(e.logits.size(), static_cast<size_t>(Config().vocab_size));
    return true;
  });
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->tokens, want);
  EXPECT_EQ(streamed, want);
  EXPECT_EQ(indices, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(last, StopReason::kMaxTokens);
  EXPECT_EQ(g->finish, FinishReason::kMaxTokens);
  // The prompt's logits are the full forward's.
  const std::vector<float> full = testing::FullLogits(*model_, prompt);
  ASSERT_EQ(prompt_logits.size(), full.size());
  for (size_t i = 0; i < full.size(); ++i) EXPECT_NEAR(prompt_logits[i], full[i], 1e-4f);
  const GenerateStats& stats = (*engine)->stats();
  EXPECT_EQ(stats.requests, 1);
  EXPECT_EQ(stats.prompt_tokens, 5);
  EXPECT_EQ(stats.generated_tokens, 7);
  EXPECT_EQ(stats.decode_steps, 6);
  EXPECT_TRUE((*engine)->idle());
}

// Five requests through two slots: they join as slots free up and step together, and each gets
// exactly the tokens it gets alone (greedy; the oracle is the full forward).
TEST_P(GenerateEngineTest, ContinuousBatchingGivesEachRequestItsOwnTokens) {
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 2, 3}, {40, 41}, {7, 7, 7, 7, 7, 7}, {30}, {12, 19, 44, 3}};
  const std::vector<int> lengths = {6, 2, 4, 8, 3};
  ResidentExpertProvider provider;
  Result<std::unique_ptr<GenerateEngine>> engine =
      GenerateEngine::Create(*model_, &provider, {.max_batch = 2, .max_context = 12});
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  std::map<int64_t, std::vector<int32_t>> streamed;
  std::vector<int64_t> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Result<int64_t> id = (*engine)->Submit(testing::GreedyRequest(prompts[i], lengths[i]),
                                           [&streamed](const TokenEvent& e) {
                                             streamed[e.request].push_back(e.token);
                                             return true;
                                           });
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(*id);
  }
  int max_running = 0;
  while (!(*engine)->idle()) {
    ASSERT_TRUE((*engine)->Step().ok());
    max_running = std::max(max_running, (*engine)->running());
  }
  EXPECT_EQ(max_running, 2);
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(i);
    const std::vector<int32_t> want = GreedyByFullForward(*model_, prompts[i], lengths[i]);
    std::optional<Generation> g = (*engine)->TakeResult(ids[i]);
    ASSERT_TRUE(g.has_value());
    EXPECT_EQ(g->tokens, want);
    EXPECT_EQ(streamed[ids[i]], want);
    EXPECT_FALSE((*engine)->TakeResult(ids[i]).has_value());  // once
  }
}

TEST_P(GenerateEngineTest, StopTokensCancelAndPromptOnly) {
  const std::vector<int32_t> prompt = {5, 17, 2, 40, 9};
  const std::vector<int32_t> greedy = GreedyByFullForward(*model_, prompt, 6);
  ResidentExpertProvider provider;
  Result<std::unique_ptr<GenerateEngine>> engine =
      GenerateEngine::Create(*model_, &provider, {.max_batch = 2, .max_context = 16});
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  // A stop token: the request ends with it, stop token included.
  GenerateRequest stop = testing::GreedyRequest(prompt, 6);
  stop.sampling.stop_tokens = {greedy[2]};
  Result<Generation> g = (*engine)->Generate(stop);
  ASSERT_TRUE(g.ok());
  const auto first_stop = std::find(greedy.begin(), greedy.end(), greedy[2]) - greedy.begin();
  EXPECT_EQ(g->tokens, std::vector<int32_t>(greedy.begin(), greedy.begin() + first_stop + 1));
  EXPECT_EQ(g->finish, FinishReason::kStopToken);
  // The callback cancels after the second token.
  g = (*engine)->Generate(testing::GreedyRequest(prompt, 6),
                          [](const TokenEvent& e) { return e.index < 1; });
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->tokens, std::vector<int32_t>(greedy.begin(), greedy.begin() + 2));
  EXPECT_EQ(g->finish, FinishReason::kCancelled);
  // max_new_tokens 0: the prompt's logits, no token.
  std::vector<float> logits;
  GenerateRequest only = testing::GreedyRequest(prompt, 0);
  only.prompt_logits = &logits;
  g = (*engine)->Generate(only);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->tokens.empty());
  EXPECT_EQ(g->finish, FinishReason::kPromptOnly);
  EXPECT_EQ(logits.size(), prompt.size() * static_cast<size_t>(Config().vocab_size));
  // Cancel a waiting request by id.
  Result<int64_t> id = (*engine)->Submit(testing::GreedyRequest(prompt, 3));
  ASSERT_TRUE(id.ok());
  EXPECT_TRUE((*engine)->Cancel(*id));
  EXPECT_FALSE((*engine)->Cancel(*id));
  EXPECT_EQ((*engine)->TakeResult(*id)->finish, FinishReason::kCancelled);
  EXPECT_TRUE((*engine)->idle());
}

TEST_P(GenerateEngineTest, BadRequestsAreRefusedBeforeAnythingRuns) {
  ResidentExpertProvider provider;
  Result<std::unique_ptr<GenerateEngine>> engine =
      GenerateEngine::Create(*model_, &provider, {.max_batch = 1, .max_context = 8});
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  auto refused = [&](GenerateRequest r, const std::string& says) {
    Result<int64_t> id = (*engine)->Submit(std::move(r));
    ASSERT_FALSE(id.ok()) << says;
    EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(id.status().message().find(says), std::string::npos) << id.status().ToString();
  };
  refused(testing::GreedyRequest({}, 2), "prompt is empty");
  refused(testing::GreedyRequest({1, 48}, 2), "outside [0, vocab_size = 48)");
  refused(testing::GreedyRequest({1, 2, 3, 4, 5}, 4), "exceeds the context of 8");
  GenerateRequest hot = testing::GreedyRequest({1}, 2);
  hot.sampling.temperature = -1.0f;
  refused(hot, "temperature");
  EXPECT_TRUE((*engine)->idle());
  EXPECT_EQ((*engine)->stats().prompt_tokens, 0);
  EXPECT_FALSE(GenerateEngine::Create(*model_, &provider, {.max_batch = 0, .max_context = 8}).ok());
}

INSTANTIATE_TEST_SUITE_P(Backends, GenerateEngineTest, testing::BackendParams(),
                         testing::BackendParamName);

}  // namespace
}  // namespace sy
