// BeamSearch (inference/beam_search.h) against brute force on a tiny random model: with width >=
// vocab^(max_new_tokens - 1) beam search must return exactly the top-`width` continuations of
// an exhaustive search, whose scores are computed independently from full-sequence
// MoeModel::Forward (no KV cache). Width 1 must equal greedy decoding. Stop tokens retire beams.
#include "inference/beam_search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "inference/resident_expert_provider.h"
#include "runtime/backend/backend.h"

namespace sy {
namespace {

struct Scored {
  std::vector<int32_t> tokens;
  double log_prob;
};

class BeamSearchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto backend = CreateBackend(Device::Cpu());
    ASSERT_TRUE(backend.ok());
    backend_ = std::move(*backend);
    ModelConfig c;
    c.vocab_size = 6;
    c.hidden_size = 16;
    c.num_layers = 2;
    c.num_heads = 2;
    c.num_kv_heads = 1;
    c.num_experts = 4;
    c.moe_intermediate_size = 8;
    c.top_k = 2;
    ModelOptions options;
    options.with_grad = false;
    auto model = MoeModel::Create(*backend_, c, options);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(*model);
    ASSERT_TRUE(model_->InitializeParameters(11, 0.5f).ok());
    ASSERT_TRUE(provider_.Install(*model_).ok());
  }

  // log p(next | ids) from a full forward over `ids`.
  std::vector<double> NextLogProbs(std::vector<int32_t> ids) {
    const int64_t t = static_cast<int64_t>(ids.size());
    auto r = model_->Forward(Tensor::Wrap(ids.data(), DType::kI32, Shape{1, t}), Tensor());
    EXPECT_TRUE(r.ok());
    const Tensor& dev = model_->logits();
    std::vector<float> out(static_cast<size_t>(dev.numel()));
    backend_->CopyAsync(dev, Tensor::Wrap(out.data(), DType::kF32, dev.shape()),
                        backend_->compute_stream());
    backend_->SynchronizeStream(backend_->compute_stream());
    const size_t v = static_cast<size_t>(model_->config().vocab_size);
    return LogSoftmax(std::span<const float>(out).subspan((ids.size() - 1) * v, v));
  }

  // Every continuation of up to `max_new` tokens (ending early at a stop token), best first.
  std::vector<Scored> BruteForce(const std::vector<int32_t>& prompt, int max_new,
                                 const std::vector<int32_t>& stops) {
    std::vector<Scored> all;
    std::function<void(std::vector<int32_t>, double)> walk = [&](std::vector<int32_t> gen,
                                                                 double lp) {
      std::vector<int32_t> ids = prompt;
      ids.insert(ids.end(), gen.begin(), gen.end());
      const std::vector<double> next = NextLogProbs(ids);
      for (int32_t t = 0; t < static_cast<int32_t>(next.size()); ++t) {
        std::vector<int32_t> g = gen;
        g.push_back(t);
        const double s = lp + next[static_cast<size_t>(t)];
        const bool stop = std::find(stops.begin(), stops.end(), t) != stops.end();
        if (stop || static_cast<int>(g.size()) == max_new) {
          all.push_back({g, s});
        } else {
          walk(g, s);
        }
      }
    };
    walk({}, 0.0);
    std::sort(all.begin(), all.end(),
              [](const Scored& a, const Scored& b) { return a.log_prob > b.log_prob; });
    return all;
  }

  void ExpectExact(const std::vector<int32_t>& prompt, int width, int max_new,
                   const std::vector<int32_t>& stops) {
    BeamSearchOptions options;
    options.width = width;
    options.max_new_tokens = max_new;
    options.stop_tokens = stops;
    auto beams = BeamSearch(*model_, prompt, options, &provider_);
    ASSERT_TRUE(beams.ok()) << beams.status().ToString();
    const std::vector<Scored> want = BruteForce(prompt, max_new, stops);
    ASSERT_EQ(beams->size(), std::min(want.size(), static_cast<size_t>(width)));
    for (size_t i = 0; i < beams->size(); ++i) {
      SCOPED_TRACE(i);
      // Same k-th best score, and each returned hypothesis scored as brute force scores it.
      EXPECT_NEAR((*beams)[i].log_prob, want[i].log_prob, 1e-4);
      const auto it = std::find_if(want.begin(), want.end(),
                                   [&](const Scored& s) { return s.tokens == (*beams)[i].tokens; });
      ASSERT_NE(it, want.end());
      EXPECT_NEAR((*beams)[i].log_prob, it->log_prob, 1e-4);
    }
  }

  std::unique_ptr<Backend> backend_;
  ResidentExpertProvider provider_;  // outlives the model, whose MoE layers point at it
  std::unique_ptr<MoeModel> model_;
};

TEST_F(BeamSearchTest, WideBeamIsExactTopK) {
  ExpectExact({1, 4, 2}, 36, 3, {});  // 6^2 beams: every 2-token prefix survives
}

TEST_F(BeamSearchTest, StopTokensRetireBeams) { ExpectExact({3, 0}, 36, 3, {5}); }

TEST_F(BeamSearchTest, NarrowBeamScoresAreExactAndWidthOneIsGreedy) {
  const std::vector<int32_t> prompt = {2, 5, 1};
  BeamSearchOptions options;
  options.width = 1;
  options.max_new_tokens = 5;
  auto beams = BeamSearch(*model_, prompt, options, &provider_);
  ASSERT_TRUE(beams.ok());
  ASSERT_EQ(beams->size(), 1u);
  std::vector<int32_t> ids = prompt;
  double lp = 0;
  for (int i = 0; i < 5; ++i) {
    const std::vector<double> next = NextLogProbs(ids);
    const auto best = std::max_element(next.begin(), next.end()) - next.begin();
    lp += next[static_cast<size_t>(best)];
    ids.push_back(static_cast<int32_t>(best));
  }
  EXPECT_EQ((*beams)[0].tokens, std::vector<int32_t>(ids.begin() + 3, ids.end()));
  EXPECT_NEAR((*beams)[0].log_prob, lp, 1e-4);

  options.width = 3;
  beams = BeamSearch(*model_, prompt, options, &provider_);
  ASSERT_TRUE(beams.ok());
  ASSERT_EQ(beams->size(), 3u);
  for (const BeamHypothesis& h : *beams) {  // each score recomputed from scratch
    std::vector<int32_t> seq = prompt;
    double want = 0;
    for (int32_t t : h.tokens) {
      want += NextLogProbs(seq)[static_cast<size_t>(t)];
      seq.push_back(t);
    }
    EXPECT_NEAR(h.log_prob, want, 1e-4);
  }
  EXPECT_GE((*beams)[0].log_prob, (*beams)[1].log_prob);
  EXPECT_GE((*beams)[1].log_prob, (*beams)[2].log_prob);
}

TEST_F(BeamSearchTest, RefusesBadOptions) {
  BeamSearchOptions options;
  options.width = 0;
  EXPECT_FALSE(BeamSearch(*model_, std::vector<int32_t>{1}, options, &provider_).ok());
  options.width = 2;
  EXPECT_FALSE(BeamSearch(*model_, std::vector<int32_t>{}, options, &provider_).ok());
}

}  // namespace
}  // namespace sy
