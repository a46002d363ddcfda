// The CPU-side policies (cpu-compute, hot-cold, layer-split): greedy decoding through each, on the
// sim backend with a throttled link and a quarter (or half) of the experts' worth of device slots,
// gives the same tokens as the resident policy and logits within 1e-5, in prefill and decode, at
// batch 1 and batch 3. Each policy is run with a calibrated latency model and with hand-made ones
// that force every kind of placement (resident, fetched, CPU); the counters add up.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "inference/expert_policy.h"
#include "inference/kv_cache_decoder.h"
#include "inference/offload/cpu_compute_expert_provider.h"
#include "inference/offload/hot_cold_expert_provider.h"
#include "inference/offload/layer_split_expert_provider.h"
#include "inference/resident_expert_provider.h"
#include "tests/inference/decoder_test_util.h"
#include "tests/inference/offload/offload_test_util.h"

namespace sy::offload {
namespace {

constexpr double kMs = 1e-3;

ModelConfig Config() {
  ModelConfig c;
  c.vocab_size = 40;
  c.hidden_size = 32;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.intermediate_size = 24;
  c.num_experts = 6;
  c.moe_intermediate_size = 16;
  c.top_k = 2;
  c.first_k_dense = 1;  // MoE index != decoder layer
  c.num_shared_experts = 1;
  return c;
}

struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // every prefill and decode logit, concatenated
};

// Prefill of 5 tokens per sequence, then 6 decode steps of all `batch` sequences at once.
Greedy Decode(MoeModel& model, ExpertProvider& provider, int batch) {
  Greedy out;
  auto decoder = KvCacheDecoder::Create(model, 24, batch, &provider);
  EXPECT_TRUE(decoder.ok()) << decoder.status().ToString();
  if (!decoder.ok()) return out;
  const int64_t vocab = model.config().vocab_size;
  auto argmax = [&](const std::vector<float>& logits, int64_t row) {
    auto begin = logits.begin() + row * vocab;
    return static_cast<int32_t>(std::max_element(begin, begin + vocab) - begin);
  };
  std::vector<int32_t> next(static_cast<size_t>(batch));
  for (int b = 0; b < batch; ++b) {
    const std::vector<int32_t> prompt = {3 + b, 17, 22 - b, 5, 39 - 2 * b};
    Result<std::vector<float>> logits = (*decoder)->Prefill(b, prompt);
    EXPECT_TRUE(logits.ok()) << logits.status().ToString();
    if (!logits.ok()) return out;
    out.logits.insert(out.logits.end(), logits->begin(), logits->end());
    next[b] = argmax(*logits, static_cast<int64_t>(prompt.size()) - 1);
    out.tokens.push_back(next[b]);
  }
  for (int step = 0; step < 6; ++step) {
    Result<std::vector<float>> logits = (*decoder)->Decode(next);
    EXPECT_TRUE(logits.ok()) << logits.status().ToString();
    if (!logits.ok()) return out;
    out.logits.insert(out.logits.end(), logits->begin(), logits->end());
    for (int b = 0; b < batch; ++b) {
      next[b] = argmax(*logits, b);
      out.tokens.push_back(next[b]);
    }
  }
  return out;
}

// cpu(s) = s ms, device(s) ~ 0, transfer 1.5 ms: Fiddler's rule puts s = 1 on the CPU and
// s >= 2 on the device. BW_link / (BW_cpu + BW_link) = 0.4.
ExpertLatencyModel HandMade(size_t expert_bytes) {
  ExpertLatencyModel m;
  m.cpu = {{1, 1 * kMs}, {16, 16 * kMs}};
  m.device = {{1, 0.01 * kMs}, {16, 0.02 * kMs}};
  m.transfer_seconds = 1.5 * kMs;
  m.expert_bytes = expert_bytes;
  return m;
}

class CpuPoliciesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sim_ = MakeSim(/*gbps=*/4.0, size_t{256} << 20);
    for (int batch : {1, 3}) {
      auto model = testing::RandomModel(*sim_, Config(), 5).value();
      ResidentExpertProvider resident;
      expected_[batch] = Decode(*model, resident, batch);
      resident_experts_run_[batch] = resident.stats().experts_run;
    }
    ASSERT_EQ(expected_[1].tokens.size(), 7u);
    ASSERT_EQ(expected_[3].tokens.size(), 21u);
  }

  // Decodes through `provider` on a fresh copy of the model and checks it against resident.
  void ExpectSameAsResident(MixedExpertProvider& provider, int batch) {
    SCOPED_TRACE(provider.name() + " batch " + std::to_string(batch));
    auto model = testing::RandomModel(*sim_, Config(), 5).value();
    const Greedy got = Decode(*model, provider, batch);
    EXPECT_EQ(got.tokens, expected_[batch].tokens);
    ASSERT_EQ(got.logits.size(), expected_[batch].logits.size());
    EXPECT_LE(MaxRelError(got.logits, expected_[batch].logits), 1e-5);

    const ExpertProviderStats& stats = provider.stats();
    EXPECT_EQ(stats.experts_run, resident_experts_run_[batch]);
    const PlacementStats& placed = provider.placement_stats();
    EXPECT_EQ(placed.resident_experts + placed.fetched_experts + placed.cpu_experts,
              stats.experts_run);
    EXPECT_EQ(placed.device_rows + placed.cpu_rows, stats.rows);
    const ExpertLayout layout = ExpertLayoutOf(*model).value();
    const TransferStats transfers = provider.transfer_stats();
    EXPECT_EQ(transfers.bytes_host_to_device, transfers.tasks_completed * layout.expert_bytes())
        << "the placement's copies and the fetches";
    EXPECT_EQ(stats.bytes_host_to_device,
              static_cast<int64_t>(transfers.bytes_host_to_device - provider.placement_bytes()));
    if (provider.cache() != nullptr &&
        provider.cache()->options().policy != DeviceCachePolicy::kLru) {
      // static and none caches keep no fetched expert: every fetch is one copy.
      EXPECT_EQ(static_cast<int64_t>(stats.bytes_host_to_device),
                placed.fetched_experts * static_cast<int64_t>(layout.expert_bytes()));
    }
    const std::map<std::string, double> metrics = provider.extra_metrics();
    EXPECT_EQ(metrics.at("experts_cpu"), static_cast<double>(placed.cpu_experts));
    EXPECT_EQ(metrics.at("experts_fetched"), static_cast<double>(placed.fetched_experts));
    EXPECT_DOUBLE_EQ(
        metrics.at("device_cache_hit_rate"),
        static_cast<double>(placed.resident_experts) / static_cast<double>(stats.experts_run));
    if (placed.fetched_experts > 0) {
      EXPECT_GT(stats.stall_seconds, 0.0);
    }
    std::printf("%-11s batch %d: %s; %.2f MiB fetched (+%.2f MiB placed), stalled %.2f ms\n",
                provider.name().c_str(), batch, placed.ToString().c_str(),
                static_cast<double>(stats.bytes_host_to_device) / (1 << 20),
                static_cast<double>(provider.placement_bytes()) / (1 << 20),
                stats.stall_seconds * 1e3);
  }

  std::unique_ptr<SimBackend> sim_;
  Greedy expected_[4];
  int64_t resident_experts_run_[4] = {};
};

size_t ExpertBytes() {
  const ModelConfig c = Config();
  return 3 * static_cast<size_t>(c.hidden_size * c.moe_intermediate_size) * sizeof(float);
}

TEST_F(CpuPoliciesTest, CpuComputeCalibrated) {
  for (int batch : {1, 3}) {
    CpuComputeOptions options;
    options.cpu_threads = 2;
    CpuComputeExpertProvider provider(options);
    ExpectSameAsResident(provider, batch);
    EXPECT_EQ(provider.device_slots(), 3) << "default: a quarter of 12 experts";
    EXPECT_EQ(provider.cache()->options().static_experts.size(), 2u) << "one scratch slot";
    EXPECT_EQ(provider.latency_model().cpu.size(), CalibrationOptions{}.rows.size());
    EXPECT_GT(provider.latency_model().transfer_seconds, 0.0);
  }
}

TEST_F(CpuPoliciesTest, CpuComputeHandMadeRuleUsesEveryPath) {
  // A profile that makes (1, 5) and (0, 2) the popular experts.
  const std::string profile = ::testing::TempDir() + "/cpu_policies_profile.json";
  {
    std::ofstream out(profile);
    out << R"({"format": "switchyard-expert-profile", "num_moe_layers": 2, "num_experts": 6,
               "counts": [[1, 1, 50, 1, 1, 1], [0, 0, 0, 0, 0, 90]]})";
  }
  for (int batch : {1, 3}) {
    CpuComputeOptions options;
    options.num_slots = 4;
    options.scratch_slots = 2;
    options.profile = profile;
    options.latency_model = HandMade(ExpertBytes());
    options.cpu_threads = 2;
    CpuComputeExpertProvider provider(options);
    ExpectSameAsResident(provider, batch);
    const std::vector<ExpertKey> statics = provider.cache()->options().static_experts;
    EXPECT_EQ(statics, (std::vector<ExpertKey>{{1, 5}, {0, 2}}));
    EXPECT_EQ(provider.placement_bytes(), 2 * ExpertBytes());
    const PlacementStats& placed = provider.placement_stats();
    EXPECT_GT(placed.fetched_experts, 0) << "prefill rows: s >= 2 is fetched";
    EXPECT_GT(placed.cpu_experts, 0) << "decode at batch 1: s = 1 runs on the CPU";
  }
  // The rule on the same numbers, as the provider applies it.
  const ExpertLatencyModel m = HandMade(ExpertBytes());
  EXPECT_EQ(FiddlerPlacement(m, 1, false), ExpertPlacement::kCpu);
  EXPECT_EQ(FiddlerPlacement(m, 2, false), ExpertPlacement::kFetch);
}

TEST_F(CpuPoliciesTest, HotColdCalibratedAndTuned) {
  for (int batch : {1, 3}) {
    HotColdOptions options;
    options.retune_every = 4;
    options.cpu_threads = 2;
    HotColdExpertProvider provider(options);
    ExpectSameAsResident(provider, batch);
    EXPECT_GT(provider.tunings(), 0);
    std::printf("hot-cold tuned alpha %.3g after %d tunings\n", provider.alpha(),
                provider.tunings());
  }
}

TEST_F(CpuPoliciesTest, HotColdHandMadeSplitsEveryLayer) {
  for (int batch : {1, 3}) {
    for (DeviceCachePolicy cache : {DeviceCachePolicy::kNone, DeviceCachePolicy::kLru}) {
      HotColdOptions options;
      options.tune_alpha = false;
      options.alpha = 1.25;  // H = round(1.25 * 0.4 * active) = round(active / 2)
      options.cache_policy = cache;
      options.latency_model = HandMade(ExpertBytes());
      options.cpu_threads = 2;
      HotColdExpertProvider provider(options);
      ExpectSameAsResident(provider, batch);
      const PlacementStats& placed = provider.placement_stats();
      EXPECT_GT(placed.cpu_experts, 0);
      EXPECT_GT(placed.fetched_experts + placed.resident_experts, 0);
      EXPECT_DOUBLE_EQ(provider.alpha(), 1.25);
      if (cache == DeviceCachePolicy::kNone) {
        EXPECT_EQ(placed.resident_experts, 0);
      }
    }
  }
}

TEST_F(CpuPoliciesTest, LayerSplit) {
  for (int batch : {1, 3}) {
    // 6 slots: MoE layer 0 on the device, layer 1 on the CPU.
    LayerSplitExpertProvider provider(LayerSplitOptions{.num_slots = 6, .cpu_threads = 2});
    ExpectSameAsResident(provider, batch);
    EXPECT_EQ(provider.device_layers(), 1);
    const PlacementStats& placed = provider.placement_stats();
    EXPECT_EQ(placed.fetched_experts, 0);
    EXPECT_EQ(provider.stats().bytes_host_to_device, 0);
    EXPECT_EQ(provider.placement_bytes(), 6 * ExpertBytes());
    EXPECT_GT(placed.resident_experts, 0);
    EXPECT_GT(placed.cpu_experts, 0);
    // The default 3 slots hold no whole layer: everything on the CPU.
    LayerSplitExpertProvider all_cpu(LayerSplitOptions{.cpu_threads = 2});
    ExpectSameAsResident(all_cpu, batch);
    EXPECT_EQ(all_cpu.device_layers(), 0);
    EXPECT_EQ(all_cpu.cache(), nullptr);
    EXPECT_EQ(all_cpu.placement_stats().cpu_experts, all_cpu.stats().experts_run);
  }
}

TEST(CpuPolicyNamesTest, MadeByNameWithOptions) {
  for (const char* name : {"cpu-compute", "hot-cold", "layer-split"}) {
    ExpertPolicyOptions options;
    options.device_slots = 4;
    Result<std::unique_ptr<ExpertProvider>> made = MakeExpertProvider(name, options);
    ASSERT_TRUE(made.ok()) << name << ": " << made.status().ToString();
    EXPECT_EQ((*made)->name(), name);
    EXPECT_NE(ExpertPolicyList().find(name), std::string::npos) << name;
  }
  // A missing profile fails the install, naming the file.
  auto sim = MakeSim(4.0, size_t{64} << 20);
  auto model = testing::RandomModel(*sim, Config(), 5).value();
  ExpertPolicyOptions options;
  options.profile = "/nonexistent/profile.json";
  auto provider = MakeExpertProvider("cpu-compute", options).value();
  const Status s = provider->Install(*model);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("/nonexistent/profile.json"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace sy::offload
