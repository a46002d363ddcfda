// Expert predictors (inference/offload/expert_predictor.h): the MLP learns a synthetic gate that
// is a function of the hidden state, the predictor file round-trips and rejects truncated and
// corrupt files, the accuracy measures count what they say on hand-made cases, and the
// skip-gate predictor fed a layer's own input reproduces that layer's gate (traces recorded by
// PredictorTraceRecorder).
#include "inference/offload/expert_predictor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "inference/kv_cache_decoder.h"
#include "inference/offload/predictor_trace.h"
#include "runtime/core/hash.h"
#include "runtime/core/read_file.h"
#include "tests/inference/decoder_test_util.h"

namespace sy::offload {
namespace {

// A synthetic trace set: 2 MoE layers; layer 1's gate = top-k of A relu(B h) + noise-free, so
// the choice is a learnable function of layer 0's h.
PredictorTraces Synthetic(int64_t rows, int64_t hidden, int experts, int k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  PredictorTraces t;
  t.num_layers = 2;
  t.num_experts = experts;
  t.top_k = k;
  t.hidden = hidden;
  t.h.resize(2);
  t.experts.resize(2);
  const int64_t mid = 16;
  std::vector<float> a(static_cast<size_t>(experts * mid)), b(static_cast<size_t>(mid * hidden));
  for (float& v : a) v = normal(rng);
  for (float& v : b) v = normal(rng);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> h(static_cast<size_t>(hidden));
    for (float& v : h) v = 3.0f + 2.0f * normal(rng);  // off-centre, scaled: needs standardising
    std::vector<float> z(static_cast<size_t>(mid)), s(static_cast<size_t>(experts));
    for (int64_t j = 0; j < mid; ++j) {
      float acc = 0;
      for (int64_t i = 0; i < hidden; ++i) acc += b[j * hidden + i] * (h[i] - 3.0f);
      z[j] = std::max(acc, 0.0f);
    }
    for (int e = 0; e < experts; ++e) {
      float acc = 0;
      for (int64_t j = 0; j < mid; ++j) acc += a[e * mid + j] * z[j];
      s[e] = acc;
    }
    const std::vector<int32_t> top = TopKExperts(s, 1, experts, k);
    t.h[0].insert(t.h[0].end(), h.begin(), h.end());
    t.h[1].insert(t.h[1].end(), h.begin(), h.end());  // unused: layer 1 predicts nothing
    t.experts[1].insert(t.experts[1].end(), top.begin(), top.end());
    for (int j = 0; j < k; ++j) t.experts[0].push_back(j);  // unused
  }
  return t;
}

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("sy_predictor_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(ExpertPredictorTest, MlpLearnsASyntheticGateAndBeatsChance) {
  const PredictorTraces traces = Synthetic(1500, 24, 8, 2, 1);
  MlpTrainOptions options;
  options.mlp_hidden = 64;
  options.epochs = 25;
  options.lr = 3e-3f;
  options.seed = 7;
  std::vector<MlpLayerReport> reports;
  int progress_calls = 0;
  auto mlp = TrainMlpPredictor(
      traces, options, [&](const MlpLayerReport&) { ++progress_calls; }, &reports);
  ASSERT_TRUE(mlp.ok()) << mlp.status().ToString();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(progress_calls, options.epochs);
  const MlpLayerReport& r = reports[0];
  std::printf("loss %.3f -> %.3f; top-2 accuracy train %.3f held-out %.3f (chance 0.25)\n",
              r.first_loss, r.loss, r.train_accuracy, r.heldout_accuracy);
  EXPECT_EQ(r.heldout_rows, 150);
  EXPECT_LT(r.loss, 0.8 * r.first_loss);
  // Chance for a top-2 of 8 guess is 2/8.
  EXPECT_GT(r.heldout_accuracy, 0.6);
  EXPECT_GT(r.train_accuracy, 0.6);

  // Deterministic for a seed.
  auto again = TrainMlpPredictor(traces, options);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->layer(0).w1, (*mlp)->layer(0).w1);
  EXPECT_EQ((*again)->layer(0).b2, (*mlp)->layer(0).b2);
}

TEST(ExpertPredictorTest, TrainingRejectsBadOptionsAndTraces) {
  const PredictorTraces traces = Synthetic(20, 4, 4, 1, 2);
  MlpTrainOptions options;
  options.stride = 3;
  EXPECT_EQ(TrainMlpPredictor(traces, options).status().code(), StatusCode::kInvalidArgument);
  options.stride = 2;  // 2 MoE layers: nothing to predict
  EXPECT_EQ(TrainMlpPredictor(traces, options).status().code(), StatusCode::kInvalidArgument);
  options.stride = 1;
  PredictorTraces bad = traces;
  bad.experts[1][3] = 9;
  EXPECT_EQ(TrainMlpPredictor(bad, options).status().code(), StatusCode::kInvalidArgument);
  bad = traces;
  bad.h[1].pop_back();
  EXPECT_EQ(TrainMlpPredictor(bad, options).status().code(), StatusCode::kInvalidArgument);
  options.weight_decay = -0.1f;  // refused by the optimizer's own validation
  EXPECT_EQ(TrainMlpPredictor(traces, options).status().code(), StatusCode::kInvalidArgument);
}

TEST(ExpertPredictorTest, WeightDecayShrinksTheWeights) {
  const PredictorTraces traces = Synthetic(200, 8, 4, 2, 3);
  MlpTrainOptions options;
  options.mlp_hidden = 16;
  options.epochs = 5;
  options.lr = 1e-2f;
  auto plain = TrainMlpPredictor(traces, options);
  options.weight_decay = 10.0f;  // AdamW: each step scales the weights by 1 - lr * wd = 0.9
  auto decayed = TrainMlpPredictor(traces, options);
  ASSERT_TRUE(plain.ok() && decayed.ok());
  auto squares = [](const std::vector<float>& v) {
    double s = 0;
    for (const float x : v) s += static_cast<double>(x) * x;
    return s;
  };
  EXPECT_LT(squares((*decayed)->layer(0).w1), 0.5 * squares((*plain)->layer(0).w1));
  EXPECT_LT(squares((*decayed)->layer(0).w2), 0.5 * squares((*plain)->layer(0).w2));
}

std::unique_ptr<MlpPredictor> SmallMlp() {
  MlpTrainOptions options;
  options.mlp_hidden = 5;
  options.epochs = 2;
  options.stride = 1;
  PredictorTraces t = Synthetic(40, 6, 4, 2, 3);
  t.num_layers = 3;  // 3 MoE layers, stride 1: two source layers
  t.h.push_back(t.h[1]);
  t.experts.push_back(t.experts[1]);
  return std::move(TrainMlpPredictor(t, options).value());
}

// Rewrites the checksum so that a field change is seen by the field checks, not the checksum.
std::string Resum(std::string bytes) {
  const uint64_t sum = Fnv1a64(bytes.substr(0, bytes.size() - 8));
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
  return bytes;
}

TEST(ExpertPredictorTest, FileRoundTripsAndScoresMatch) {
  const auto mlp = SmallMlp();
  const std::string path = TempPath("roundtrip.pred");
  ASSERT_TRUE(SaveMlpPredictor(*mlp, path).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto loaded = LoadMlpPredictor(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ((*loaded)->stride(), 1);
  EXPECT_EQ((*loaded)->num_layers(), 3);
  EXPECT_EQ((*loaded)->num_experts(), 4);
  EXPECT_EQ((*loaded)->top_k(), 2);
  EXPECT_EQ((*loaded)->hidden(), 6);
  EXPECT_EQ((*loaded)->mlp_hidden(), 5);
  std::vector<float> h(3 * 6);
  for (size_t i = 0; i < h.size(); ++i) h[i] = std::sin(static_cast<float>(i));
  for (int m = 0; m < 2; ++m) {
    std::vector<float> a(3 * 4), b(3 * 4);
    mlp->Scores(m, h, 3, a);
    (*loaded)->Scores(m, h, 3, b);
    EXPECT_EQ(a, b);
  }
  EXPECT_EQ(SerializeMlpPredictor(**loaded), SerializeMlpPredictor(*mlp));
  std::filesystem::remove(path);
  EXPECT_EQ(LoadMlpPredictor(path).status().code(), StatusCode::kNotFound);
}

// A predictor file written by an earlier build (the fuzzer's seed) still loads, and serialises
// back to the same bytes: the format and its checksum have not changed.
TEST(ExpertPredictorTest, AFileFromAnEarlierBuildRoundTripsByteForByte) {
  Result<std::string> bytes = ReadFile(SY_PREDICTOR_SEED_FILE);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  ASSERT_EQ(bytes->size(), 912u);
  auto loaded = LoadMlpPredictor(SY_PREDICTOR_SEED_FILE);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ((*loaded)->num_experts(), 4);
  EXPECT_EQ((*loaded)->hidden(), 32);
  EXPECT_EQ((*loaded)->mlp_hidden(), 4);
  EXPECT_EQ(SerializeMlpPredictor(**loaded), *bytes);
}

TEST(ExpertPredictorTest, ParserRejectsTruncatedCorruptAndOutOfRangeFiles) {
  const std::string good = SerializeMlpPredictor(*SmallMlp());
  ASSERT_TRUE(ParseMlpPredictor(good, "f.pred").ok());
  // Every truncation.
  for (size_t n = 0; n < good.size(); ++n) {
    const Status s = ParseMlpPredictor(good.substr(0, n), "f.pred").status();
    ASSERT_EQ(s.code(), StatusCode::kDataLoss) << n << ": " << s.ToString();
    ASSERT_NE(s.message().find("f.pred"), std::string::npos) << s.message();
  }
  EXPECT_EQ(ParseMlpPredictor(good + "x", "f.pred").status().code(), StatusCode::kDataLoss);
  // A flipped bit anywhere is caught (magic, a field, a weight, the checksum).
  for (size_t at : {size_t{0}, size_t{13}, size_t{41}, good.size() / 2, good.size() - 1}) {
    std::string bad = good;
    bad[at] ^= 0x10;
    const Status s = ParseMlpPredictor(bad, "f.pred").status();
    EXPECT_FALSE(s.ok()) << at;
    EXPECT_NE(s.message().find("f.pred"), std::string::npos) << s.message();
  }
  auto with_u32 = [&good](size_t at, uint32_t v) {
    std::string bad = good;
    std::memcpy(bad.data() + at, &v, 4);
    return ParseMlpPredictor(Resum(bad), "f.pred").status();
  };
  struct Case {
    size_t at;
    uint32_t value;
    const char* field;
  };
  for (const Case& c : {Case{8, 2, "version"}, Case{12, 3, "stride"}, Case{16, 1, "num_layers"},
                        Case{16, 100000, "num_layers"}, Case{20, 0, "num_experts"},
                        Case{24, 5, "top_k"}, Case{28, 0, "mlp_hidden"}}) {
    const Status s = with_u32(c.at, c.value);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.field << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.field), std::string::npos) << s.message();
  }
  // A header that claims a huge shape: a size mismatch, never an allocation.
  {
    std::string bad = good;
    const uint64_t hidden = uint64_t{1} << 20;
    std::memcpy(bad.data() + 32, &hidden, 8);
    EXPECT_EQ(ParseMlpPredictor(Resum(bad), "f.pred").status().code(), StatusCode::kDataLoss);
    const uint64_t huge = uint64_t{1} << 40;
    std::memcpy(bad.data() + 32, &huge, 8);
    const Status s = ParseMlpPredictor(Resum(bad), "f.pred").status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("hidden"), std::string::npos);
  }
  // A NaN weight with a valid checksum.
  {
    std::string bad = good;
    const float nan = std::nanf("");
    std::memcpy(bad.data() + 40 + 4 * 12, &nan, 4);  // w1 of layer 0
    const Status s = ParseMlpPredictor(Resum(bad), "f.pred").status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("w1"), std::string::npos) << s.message();
  }
}

TEST(ExpertPredictorTest, AccuracyAndTopKOnHandMadeCases) {
  PredictorAccuracy acc;
  const std::vector<int32_t> gate1 = {1, 3, 5}, pred1 = {3, 5, 7};
  acc.Add(gate1, pred1);  // 2 of 3
  EXPECT_EQ(acc.covered, 2);
  EXPECT_EQ(acc.gate, 3);
  const std::vector<int32_t> gate2 = {0}, pred2 = {};
  acc.Add(gate2, pred2);  // 0 of 1
  const std::vector<int32_t> gate3 = {2, 4}, pred3 = {4, 2, 0, 1};
  acc.Add(gate3, pred3);  // 2 of 2
  EXPECT_EQ(acc.covered, 4);
  EXPECT_EQ(acc.gate, 6);
  EXPECT_EQ(acc.layers, 3);
  EXPECT_DOUBLE_EQ(acc.fraction(), 4.0 / 6.0);
  EXPECT_EQ(PredictorAccuracy{}.fraction(), 0.0);

  // Rows {0,1} vs {1,2}: 1 of 2; {3,0} vs {0,3}: 2 of 2; {2,1} vs {3,0}: 0 of 2 -> 3/6.
  const std::vector<int32_t> targets = {0, 1, 3, 0, 2, 1}, predicted = {1, 2, 0, 3, 3, 0};
  EXPECT_DOUBLE_EQ(TopKAccuracy(targets, predicted, 3, 2), 0.5);

  // Ties go to the lower id; descending scores.
  const std::vector<float> scores = {0.5f, 2.0f, 0.5f, 1.0f, /*row 1*/ 3.0f, 3.0f, 3.0f, -1.0f};
  EXPECT_EQ(TopKExperts(scores, 2, 4, 3), (std::vector<int32_t>{1, 3, 0, 0, 1, 2}));
  // Most voted first, ties by id.
  const std::vector<int32_t> rows = {2, 1, 2, 0, 3, 2, 1, 3};
  EXPECT_EQ(PredictedSet(rows, 5), (std::vector<int32_t>{2, 1, 3, 0}));
}

TEST(ExpertPredictorTest, SkipGateOnALayersOwnInputReproducesItsGate) {
  auto cpu = CreateBackend(Device::Cpu()).value();
  ModelConfig c;
  c.vocab_size = 40;
  c.hidden_size = 32;
  c.num_layers = 4;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.intermediate_size = 24;
  c.num_experts = 8;
  c.moe_intermediate_size = 16;
  c.top_k = 2;
  c.first_k_dense = 1;
  auto model = testing::RandomModel(*cpu, c, 11).value();
  PredictorTraceRecorder recorder;
  auto decoder = KvCacheDecoder::Create(*model, 32, 1, &recorder).value();
  const std::vector<int32_t> prompt = {3, 17, 22, 5, 39, 8, 1, 0, 12};
  ASSERT_TRUE(decoder->Prefill(0, prompt).ok());
  ASSERT_TRUE(decoder->Decode(std::vector<int32_t>{4}).ok());
  const PredictorTraces& t = recorder.traces();
  ASSERT_EQ(t.num_layers, 3);
  ASSERT_EQ(t.rows(), 10);
  for (int m = 0; m < 3; ++m) {
    ASSERT_EQ(t.h[m].size(), 10u * 32u);
    ASSERT_EQ(t.experts[m].size(), 10u * 2u);
  }
  auto skip = SkipGatePredictor::Create(*model, 1).value();
  ASSERT_TRUE(CheckPredictorFits(*skip, c).ok());
  // Gate m + 1 fed layer m + 1's own input is that layer's router: the same top-k.
  for (int m = 0; m + 1 < 3; ++m) {
    std::vector<float> scores(10 * 8);
    skip->Scores(m, t.h[m + 1], 10, scores);
    EXPECT_EQ(TopKExperts(scores, 10, 8, 2), t.experts[m + 1]) << m;
  }
  EXPECT_EQ(SkipGatePredictor::Create(*model, 3).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(SkipGatePredictor::Create(*model, 2).ok());

  // An MLP trained on these traces fits the model; one made for another shape does not.
  MlpTrainOptions options;
  options.mlp_hidden = 8;
  options.epochs = 3;
  auto mlp = TrainMlpPredictor(t, options);
  ASSERT_TRUE(mlp.ok()) << mlp.status().ToString();
  EXPECT_TRUE(CheckPredictorFits(**mlp, c).ok());
  ModelConfig other = c;
  other.num_experts = 6;
  const Status s = CheckPredictorFits(**mlp, other);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("num_experts"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace sy::offload
