// The predictive policy (ProMoE): greedy decoding through PredictiveExpertProvider on the sim
// backend with a throttled link gives the same tokens and logits as the resident provider, at
// batch 1 and batch 2, with the skip-gate predictor (stride 1 and 2), an MLP predictor trained on
// recorded traces (and loaded from its file through MakeExpertProvider), and every ablation
// switch; dropping stale predictions (early preemption) moves fewer bytes than keeping them.
#include "inference/offload/predictive_expert_provider.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "inference/expert_policy.h"
#include "inference/kv_cache_decoder.h"
#include "inference/offload/predictor_trace.h"
#include "inference/resident_expert_provider.h"
#include "tests/inference/decoder_test_util.h"
#include "tests/inference/offload/offload_test_util.h"

namespace sy::offload {
namespace {

ModelConfig Config() {
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
  c.first_k_dense = 1;  // 3 MoE layers; MoE index != decoder layer
  c.num_shared_experts = 1;
  return c;
}

struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // every step's logits, concatenated
};

// Prefill of each sequence, then `steps` greedy decode steps of all of them at once.
Greedy Decode(MoeModel& model, ExpertProvider& provider, int batch, int steps = 6) {
  Greedy out;
  auto decoder = KvCacheDecoder::Create(model, 32, batch, &provider);
  EXPECT_TRUE(decoder.ok()) << decoder.status().ToString();
  if (!decoder.ok()) return out;
  const int64_t vocab = model.config().vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {{3, 17, 22, 5, 39, 11, 2}, {8, 1, 30, 30, 9}};
  std::vector<int32_t> next(static_cast<size_t>(batch));
  for (int b = 0; b < batch; ++b) {
    Result<std::vector<float>> logits = (*decoder)->Prefill(b, prompts[static_cast<size_t>(b)]);
    EXPECT_TRUE(logits.ok()) << logits.status().ToString();
    if (!logits.ok()) return out;
    out.logits.insert(out.logits.end(), logits->begin(), logits->end());
    next[static_cast<size_t>(b)] = static_cast<int32_t>(
        std::max_element(logits->end() - vocab, logits->end()) - (logits->end() - vocab));
  }
  for (int step = 0; step < steps; ++step) {
    out.tokens.insert(out.tokens.end(), next.begin(), next.end());
    Result<std::vector<float>> logits = (*decoder)->Decode(next);
    EXPECT_TRUE(logits.ok()) << logits.status().ToString();
    if (!logits.ok()) return out;
    out.logits.insert(out.logits.end(), logits->begin(), logits->end());
    for (int b = 0; b < batch; ++b) {
      const auto row = logits->begin() + b * vocab;
      next[static_cast<size_t>(b)] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    }
  }
  return out;
}

std::shared_ptr<const ExpertPredictor> TrainedMlp(Backend& backend, int stride) {
  auto model = testing::RandomModel(backend, Config(), 5).value();
  PredictorTraceRecorder recorder;
  Decode(*model, recorder, 2, 4);
  MlpTrainOptions options;
  options.stride = stride;
  options.mlp_hidden = 16;
  options.epochs = 10;
  options.lr = 3e-3f;
  std::vector<MlpLayerReport> reports;
  auto mlp = TrainMlpPredictor(recorder.traces(), options, {}, &reports);
  SY_CHECK_OK(mlp.status());
  for (const MlpLayerReport& r : reports) {
    std::printf("mlp stride %d layer %d: %lld rows, loss %.3f -> %.3f, train top-k %.2f\n", stride,
                r.source, static_cast<long long>(r.train_rows), r.first_loss, r.loss,
                r.train_accuracy);
  }
  return std::shared_ptr<const ExpertPredictor>(std::move(mlp).value());
}

void ExpectSameAsResident(const Greedy& got, const Greedy& expected) {
  EXPECT_EQ(got.tokens, expected.tokens);
  ASSERT_EQ(got.logits.size(), expected.logits.size());
  EXPECT_LE(MaxRelError(got.logits, expected.logits), 1e-5);
}

void ExpectStatsAddUp(PredictiveExpertProvider& p, const ResidentExpertProvider& resident) {
  p.DrainTransfers();
  EXPECT_EQ(p.stats().experts_run, resident.stats().experts_run);
  EXPECT_EQ(p.stats().rows, resident.stats().rows);
  const TransferStats t = p.transfer_stats();
  const ExpertLayout& layout = p.cache().layout();
  EXPECT_EQ(t.bytes_host_to_device, t.chunks_copied * layout.chunk_bytes());
  EXPECT_EQ(p.stats().bytes_host_to_device, static_cast<int64_t>(t.bytes_host_to_device));
  EXPECT_EQ(t.tasks_queued, t.tasks_completed + t.tasks_cancelled + t.tasks_failed);
  EXPECT_EQ(t.tasks_failed, 0u);
  EXPECT_GE(p.stats().stall_seconds, 0.0);
  const PredictorAccuracy& acc = p.predictor_accuracy();
  EXPECT_GT(acc.layers, 0);
  EXPECT_GT(acc.gate, 0);
  EXPECT_LE(acc.covered, acc.gate);
  const std::map<std::string, double> extra = p.extra_metrics();
  ASSERT_TRUE(extra.count("predictor_accuracy"));
  EXPECT_DOUBLE_EQ(extra.at("predictor_accuracy"), acc.fraction());
  ASSERT_TRUE(extra.count("device_cache_hit_rate"));
  EXPECT_GE(extra.at("device_cache_hit_rate"), 0.0);
  EXPECT_LE(extra.at("device_cache_hit_rate"), 1.0);
}

TEST(PredictiveExpertProviderTest, GreedyDecodeEqualsResidentWithEveryPredictorAndAblation) {
  auto sim = MakeSim(/*gbps=*/2.0, size_t{256} << 20);
  const ModelConfig config = Config();
  const std::shared_ptr<const ExpertPredictor> mlp1 = TrainedMlp(*sim, 1);
  const std::shared_ptr<const ExpertPredictor> mlp2 = TrainedMlp(*sim, 2);

  for (int batch : {1, 2}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    auto resident_model = testing::RandomModel(*sim, config, 5).value();
    ResidentExpertProvider resident;
    const Greedy expected = Decode(*resident_model, resident, batch);
    ASSERT_EQ(expected.tokens.size(), static_cast<size_t>(6 * batch));

    struct Case {
      const char* name;
      PredictiveOptions options;
    };
    std::vector<Case> cases;
    auto add = [&cases](const char* name, auto&& set) {
      PredictiveOptions o;
      set(o);
      cases.push_back({name, o});
    };
    add("skip-gate stride 1", [](PredictiveOptions&) {});
    add("skip-gate stride 2", [](PredictiveOptions& o) { o.stride = 2; });
    add("mlp stride 1", [&](PredictiveOptions& o) { o.predictor = mlp1; });
    add("mlp stride 2", [&](PredictiveOptions& o) { o.predictor = mlp2; });
    add("lru baseline",
        [](PredictiveOptions& o) { o.prefetch = o.early_preemption = o.reorder = false; });
    add("prefetch alone", [](PredictiveOptions& o) { o.early_preemption = o.reorder = false; });
    add("prefetch + preemption", [](PredictiveOptions& o) { o.reorder = false; });
    add("reorder without preemption", [](PredictiveOptions& o) { o.early_preemption = false; });
    add("4 slots", [](PredictiveOptions& o) { o.num_slots = 4; });
    add("no cache", [](PredictiveOptions& o) {
      o.num_slots = 4;
      o.cache_policy = DeviceCachePolicy::kNone;
    });
    for (const Case& c : cases) {
      SCOPED_TRACE(c.name);
      auto model = testing::RandomModel(*sim, config, 5).value();
      PredictiveExpertProvider predictive(c.options);
      const Greedy got = Decode(*model, predictive, batch);
      ExpectSameAsResident(got, expected);
      if (c.options.prefetch) {
        ExpectStatsAddUp(predictive, resident);
      } else {
        EXPECT_EQ(predictive.predictor_accuracy().layers, 0);
      }
      const TransferStats t = predictive.transfer_stats();
      std::printf(
          "batch %d %-28s %-9s: accuracy %.2f (%lld/%lld), %llu tasks (%llu cancelled, %llu "
          "promoted), %.2f MiB, stalled %.2f ms\n",
          batch, c.name, predictive.predictor().name().c_str(),
          predictive.predictor_accuracy().fraction(),
          static_cast<long long>(predictive.predictor_accuracy().covered),
          static_cast<long long>(predictive.predictor_accuracy().gate),
          static_cast<unsigned long long>(t.tasks_queued),
          static_cast<unsigned long long>(t.tasks_cancelled),
          static_cast<unsigned long long>(t.promoted),
          static_cast<double>(t.bytes_host_to_device) / (1 << 20),
          predictive.stats().stall_seconds * 1e3);
    }
  }
}

TEST(PredictiveExpertProviderTest, MakeExpertProviderLoadsAPredictorFile) {
  auto sim = MakeSim(/*gbps=*/4.0, size_t{256} << 20);
  const ModelConfig config = Config();
  auto resident_model = testing::RandomModel(*sim, config, 5).value();
  ResidentExpertProvider resident;
  const Greedy expected = Decode(*resident_model, resident, 1);

  auto mlp = std::dynamic_pointer_cast<const MlpPredictor>(TrainedMlp(*sim, 2));
  ASSERT_NE(mlp, nullptr);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("sy_predictive_test_" + std::to_string(::getpid()) + ".pred"))
                               .string();
  ASSERT_TRUE(SaveMlpPredictor(*mlp, path).ok());
  ExpertPolicyOptions options;
  options.predictor = path;
  options.device_slots = 6;
  auto provider = MakeExpertProvider("predictive", options);
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();
  auto* predictive = dynamic_cast<PredictiveExpertProvider*>(provider->get());
  ASSERT_NE(predictive, nullptr);
  auto model = testing::RandomModel(*sim, config, 5).value();
  ExpectSameAsResident(Decode(*model, *predictive, 1), expected);
  EXPECT_EQ(predictive->predictor().name(), "mlp");
  EXPECT_EQ(predictive->predictor().stride(), 2);
  EXPECT_EQ(predictive->cache().num_slots(), 6);

  // A stride that contradicts the file, a missing file, and a bad stride are refused.
  options.predictor_stride = 1;
  EXPECT_EQ(MakeExpertProvider("predictive", options).status().code(),
            StatusCode::kInvalidArgument);
  options.predictor_stride = 3;
  options.predictor.clear();
  EXPECT_EQ(MakeExpertProvider("predictive", options).status().code(),
            StatusCode::kInvalidArgument);
  std::filesystem::remove(path);
  options.predictor = path;
  options.predictor_stride = 0;
  EXPECT_EQ(MakeExpertProvider("predictive", options).status().code(), StatusCode::kNotFound);

  // A predictor made for another model is refused at Install.
  ModelConfig other = config;
  other.num_experts = 6;
  auto other_model = testing::RandomModel(*sim, other, 5).value();
  PredictiveOptions wrong_options;
  wrong_options.predictor = mlp;
  PredictiveExpertProvider wrong(wrong_options);
  EXPECT_EQ(wrong.Install(*other_model).code(), StatusCode::kInvalidArgument);
}

// Predicts the experts the skip-gate thinks least likely: nearly always wrong, so nearly every
// LOW task is stale.
class WrongPredictor final : public ExpertPredictor {
 public:
  explicit WrongPredictor(std::unique_ptr<SkipGatePredictor> skip) : skip_(std::move(skip)) {}
  std::string name() const override { return "wrong"; }
  int stride() const override { return skip_->stride(); }
  int num_layers() const override { return skip_->num_layers(); }
  int num_experts() const override { return skip_->num_experts(); }
  int64_t hidden() const override { return skip_->hidden(); }
  int top_k() const override { return skip_->top_k(); }
  void Scores(int source, std::span<const float> h, int64_t rows,
              std::span<float> scores) const override {
    skip_->Scores(source, h, rows, scores);
    for (float& s : scores) s = -s;
  }

 private:
  std::unique_ptr<SkipGatePredictor> skip_;
};

TEST(PredictiveExpertProviderTest, DroppingStalePredictionsMovesFewerBytes) {
  // A slow link, so predictions are still queued when their layer's gate has spoken.
  auto sim = MakeSim(/*gbps=*/0.02, size_t{256} << 20, /*latency_us=*/500.0);
  ModelConfig config = Config();
  config.num_experts = 16;  // the least likely 2 of 16 are nearly never chosen
  auto resident_model = testing::RandomModel(*sim, config, 5).value();
  ResidentExpertProvider resident;
  const Greedy expected = Decode(*resident_model, resident, 2, 3);

  uint64_t bytes[2] = {0, 0};
  for (const bool preempt : {false, true}) {
    SCOPED_TRACE(preempt ? "early preemption" : "stale predictions kept");
    auto model = testing::RandomModel(*sim, config, 5).value();
    auto wrong = std::make_shared<WrongPredictor>(SkipGatePredictor::Create(*model, 1).value());
    PredictiveExpertProvider p(
        {.num_slots = 12, .predictor = wrong, .early_preemption = preempt, .reorder = false});
    ExpectSameAsResident(Decode(*model, p, 2, 3), expected);
    p.DrainTransfers();  // every task kept runs to the end and is counted
    const TransferStats t = p.transfer_stats();
    bytes[preempt ? 1 : 0] = t.bytes_host_to_device;
    std::printf(
        "%s: %llu tasks (%llu completed, %llu cancelled), %llu hits, %llu promoted, %llu chunks, "
        "%.2f MiB, accuracy %.2f\n",
        preempt ? "preemption" : "no preemption", static_cast<unsigned long long>(t.tasks_queued),
        static_cast<unsigned long long>(t.tasks_completed),
        static_cast<unsigned long long>(t.tasks_cancelled), static_cast<unsigned long long>(t.hits),
        static_cast<unsigned long long>(t.promoted),
        static_cast<unsigned long long>(t.chunks_copied),
        static_cast<double>(t.bytes_host_to_device) / (1 << 20), p.predictor_accuracy().fraction());
    if (preempt) {
      EXPECT_GT(t.tasks_cancelled, 0u);
    } else {
      EXPECT_EQ(t.tasks_cancelled, 0u);
    }
  }
  EXPECT_LT(bytes[1], bytes[0]);
}

}  // namespace
}  // namespace sy::offload
