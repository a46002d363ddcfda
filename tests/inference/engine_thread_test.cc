// EngineThread (inference/engine_thread.h): a GenerateEngine on its own thread, fed by others.
// Requests submitted from many threads at once each get the tokens they get alone (greedy; the
// oracle is GenerateEngine::Generate on a separate engine, itself checked against the full forward
// in generate_engine_test.cc); a cancelled request frees its slot for the next; bad requests are
// refused on the submitting thread; Drain waits for what is in flight and refuses what comes
// after; the destructor ends what is left as cancelled; Call runs on the engine thread.
#include "inference/engine_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "inference/resident_expert_provider.h"
#include "tests/inference/decoder_test_util.h"

namespace sy {
namespace {

using std::chrono::milliseconds;

ModelConfig Config() {
  ModelConfig c;
  c.vocab_size = 48;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.intermediate_size = 24;
  c.num_experts = 4;
  c.moe_intermediate_size = 16;
  c.top_k = 2;
  return c;
}

// Reads a handle to its end: every token, and the final update.
std::pair<std::vector<int32_t>, RequestUpdate> ReadAll(RequestHandle& handle) {
  std::vector<int32_t> tokens;
  while (true) {
    RequestUpdate u = handle.Next(milliseconds(1000));
    tokens.insert(tokens.end(), u.tokens.begin(), u.tokens.end());
    if (u.finished) return {tokens, u};
  }
}

class EngineThreadTest : public testing::BackendTest {
 protected:
  void SetUp() override {
    testing::BackendTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    Result<std::unique_ptr<MoeModel>> model = testing::RandomModel(*backend_, Config(), 5);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(model).value();
  }
  std::unique_ptr<EngineThread> StartWorker(int max_batch, int64_t max_context) {
    Result<std::unique_ptr<GenerateEngine>> engine = GenerateEngine::Create(
        *model_, &provider_, {.max_batch = max_batch, .max_context = max_context});
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    return engine.ok() ? EngineThread::Start(std::move(engine).value()) : nullptr;
  }
  std::unique_ptr<MoeModel> model_;
  ResidentExpertProvider provider_;
};

TEST_P(EngineThreadTest, ConcurrentSubmittersGetTheirOwnTokens) {
  constexpr int kRequests = 12;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> lengths;
  for (int i = 0; i < kRequests; ++i) {
    prompts.push_back({(i * 7) % 48, (i * 13 + 5) % 48, (i * 3 + 1) % 48});
    lengths.push_back(3 + i % 5);
  }
  // The oracle: each request alone, on an engine of its own (built before the worker's, whose
  // thread then owns the backend).
  std::vector<std::vector<int32_t>> want;
  {
    Result<std::unique_ptr<GenerateEngine>> alone =
        GenerateEngine::Create(*model_, &provider_, {.max_batch = 1, .max_context = 16});
    ASSERT_TRUE(alone.ok()) << alone.status().ToString();
    for (int i = 0; i < kRequests; ++i) {
      Result<Generation> g = (*alone)->Generate(testing::GreedyRequest(prompts[i], lengths[i]));
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      want.push_back(g->tokens);
    }
  }
  std::unique_ptr<EngineThread> worker = StartWorker(4, 16);
  ASSERT_NE(worker, nullptr);
  std::vector<std::vector<int32_t>> got(kRequests);
  std::vector<RequestUpdate> ends(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&, i] {
      Result<std::shared_ptr<RequestHandle>> h =
          worker->Submit(testing::GreedyRequest(prompts[i], lengths[i]));
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      std::tie(got[i], ends[i]) = ReadAll(**h);
    });
  }
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got[i], want[i]);
    EXPECT_TRUE(ends[i].status.ok()) << ends[i].status.ToString();
    EXPECT_EQ(ends[i].finish, FinishReason::kMaxTokens);
  }
  EXPECT_EQ(worker->in_flight(), 0);
  // Call runs on the engine thread, between steps: the engine finished every request.
  int64_t requests = 0;
  std::thread::id ran_on;
  ASSERT_TRUE(worker
                  ->Call([&](GenerateEngine& engine) {
                    requests = engine.stats().requests;
                    ran_on = std::this_thread::get_id();
                  })
                  .ok());
  EXPECT_EQ(requests, kRequests);
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST_P(EngineThreadTest, CancelFreesTheSlotAndBadRequestsAreRefusedAtSubmit) {
  std::unique_ptr<EngineThread> worker = StartWorker(1, 4096);
  ASSERT_NE(worker, nullptr);
  // Refused on this thread, before the engine sees them.
  Result<std::shared_ptr<RequestHandle>> bad = worker->Submit(testing::GreedyRequest({1, 48}, 2));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("outside [0, vocab_size = 48)"), std::string::npos);
  bad = worker->Submit(testing::GreedyRequest({1, 2}, 4095));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("exceeds the context of 4096"), std::string::npos);
  // One slot: a long request holds it until it is cancelled, then the next one runs.
  Result<std::shared_ptr<RequestHandle>> long_one =
      worker->Submit(testing::GreedyRequest({3, 4}, 4000));
  ASSERT_TRUE(long_one.ok());
  RequestUpdate first = (*long_one)->Next(milliseconds(10000));
  ASSERT_FALSE(first.tokens.empty());
  Result<std::shared_ptr<RequestHandle>> next =
      worker->Submit(testing::GreedyRequest({9, 8, 7}, 3));
  ASSERT_TRUE(next.ok());
  (*long_one)->Cancel();
  auto [long_tokens, long_end] = ReadAll(**long_one);
  EXPECT_EQ(long_end.finish, FinishReason::kCancelled);
  EXPECT_LT(first.tokens.size() + long_tokens.size(), 4000u);
  auto [next_tokens, next_end] = ReadAll(**next);
  EXPECT_EQ(next_end.finish, FinishReason::kMaxTokens);
  EXPECT_EQ(next_tokens.size(), 3u);
  // A request cancelled before it starts ends without a token.
  Result<std::shared_ptr<RequestHandle>> blocker =
      worker->Submit(testing::GreedyRequest({3}, 4000));
  Result<std::shared_ptr<RequestHandle>> never = worker->Submit(testing::GreedyRequest({5}, 4));
  ASSERT_TRUE(blocker.ok() && never.ok());
  (*never)->Cancel();
  (*blocker)->Cancel();
  auto [never_tokens, never_end] = ReadAll(**never);
  EXPECT_EQ(never_end.finish, FinishReason::kCancelled);
  ReadAll(**blocker);
  EXPECT_EQ(worker->in_flight(), 0);
}

TEST_P(EngineThreadTest, DrainFinishesInFlightAndRefusesNew) {
  std::unique_ptr<EngineThread> worker = StartWorker(2, 32);
  ASSERT_NE(worker, nullptr);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < 5; ++i) {
    Result<std::shared_ptr<RequestHandle>> h =
        worker->Submit(testing::GreedyRequest({i + 1, i + 2}, 6));
    ASSERT_TRUE(h.ok());
    handles.push_back(*h);
  }
  worker->Drain();
  EXPECT_EQ(worker->in_flight(), 0);
  for (auto& h : handles) {
    auto [tokens, end] = ReadAll(*h);
    EXPECT_EQ(tokens.size(), 6u);
    EXPECT_EQ(end.finish, FinishReason::kMaxTokens);
  }
  Result<std::shared_ptr<RequestHandle>> late = worker->Submit(testing::GreedyRequest({1}, 1));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kUnavailable);
}

TEST_P(EngineThreadTest, DestructorCancelsWhatIsInFlight) {
  std::shared_ptr<RequestHandle> handle;
  {
    std::unique_ptr<EngineThread> worker = StartWorker(1, 4096);
    ASSERT_NE(worker, nullptr);
    Result<std::shared_ptr<RequestHandle>> h = worker->Submit(testing::GreedyRequest({1, 2}, 4000));
    ASSERT_TRUE(h.ok());
    handle = *h;
    ASSERT_FALSE(handle->Next(milliseconds(10000)).tokens.empty());
  }
  auto [tokens, end] = ReadAll(*handle);
  EXPECT_EQ(end.finish, FinishReason::kCancelled);
}

INSTANTIATE_TEST_SUITE_P(Backends, EngineThreadTest, testing::BackendParams(),
                         testing::BackendParamName);

}  // namespace
}  // namespace sy
