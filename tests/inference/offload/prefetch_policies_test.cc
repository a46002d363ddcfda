// The prefetching expert policies (prefetch-all, ring, pregated): greedy decoding through each on
// the sim backend with a throttled link, at batch 1 and 3 (a prefill of 5 tokens per sequence,
// then 8 decode steps), gives the same tokens as the resident provider and logits within 1e-5;
// each policy's copies are the ones it promises (every expert of the next layer / of the ring's
// next layer / exactly the pre-gate's selection), issued before the layer that needs them runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "inference/expert_policy.h"
#include "inference/kv_cache_decoder.h"
#include "inference/offload/prefetch_all_expert_provider.h"
#include "inference/offload/pregated_expert_provider.h"
#include "inference/offload/ring_expert_provider.h"
#include "inference/resident_expert_provider.h"
#include "tests/inference/decoder_test_util.h"
#include "tests/inference/offload/offload_test_util.h"

namespace sy::offload {
namespace {

// 4 MoE layers (decoder layers 1..4) of 6 experts, top-2: a ring of K = 2 < L.
ModelConfig Config(bool pregate) {
  ModelConfig c;
  c.vocab_size = 40;
  c.hidden_size = 32;
  c.num_layers = 5;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.intermediate_size = 24;
  c.num_experts = 6;
  c.moe_intermediate_size = 16;
  c.top_k = 2;
  c.first_k_dense = 1;  // MoE index != decoder layer
  c.num_shared_experts = 1;
  c.pregate = pregate;
  return c;
}
constexpr int kMoeLayers = 4;
constexpr int kExperts = 6;
constexpr int kTopK = 2;

// The resident provider, recording which experts each MoE layer activated.
class RecordingResident final : public ResidentExpertProvider {
 public:
  int64_t active_in_layer0 = 0;  // sum over steps of layer 0's activated experts
  int64_t active_after0 = 0;     // the same for layers 1 ..

 protected:
  Status Routed(Backend& backend, const MoeRouting& routing) override {
    (void)backend;
    for (const int64_t rows : routing.routing->plan->group_rows) {
      if (rows == 0) continue;
      (routing.moe_index == 0 ? active_in_layer0 : active_after0) += 1;
    }
    return Status::Ok();
  }
};

struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // the prefills' and every step's logits, concatenated
};

Greedy Decode(MoeModel& model, ExpertProvider& provider, int batch) {
  Greedy out;
  auto decoder = KvCacheDecoder::Create(model, 24, batch, &provider);
  EXPECT_TRUE(decoder.ok()) << decoder.status().ToString();
  if (!decoder.ok()) return out;
  const int64_t vocab = model.config().vocab_size;
  auto argmax = [&](const float* row) {
    return static_cast<int32_t>(std::max_element(row, row + vocab) - row);
  };
  std::vector<int32_t> next(static_cast<size_t>(batch));
  for (int b = 0; b < batch; ++b) {
    const std::vector<int32_t> prompt = {3 + b, 17, 22 - b, 5, 39 - 2 * b};
    Result<std::vector<float>> logits = (*decoder)->Prefill(b, prompt);
    EXPECT_TRUE(logits.ok()) << logits.status().ToString();
    if (!logits.ok()) return out;
    out.logits.insert(out.logits.end(), logits->begin(), logits->end());
    next[static_cast<size_t>(b)] = argmax(logits->data() + logits->size() - vocab);
  }
  for (int step = 0; step < 8; ++step) {
    out.tokens.insert(out.tokens.end(), next.begin(), next.end());
    Result<std::vector<float>> logits = (*decoder)->Decode(next);
    EXPECT_TRUE(logits.ok()) << logits.status().ToString();
    if (!logits.ok()) return out;
    out.logits.insert(out.logits.end(), logits->begin(), logits->end());
    for (int b = 0; b < batch; ++b) next[static_cast<size_t>(b)] = argmax(&(*logits)[b * vocab]);
  }
  return out;
}

struct Reference {
  Greedy greedy;
  ExpertProviderStats stats;
  int64_t active_in_layer0 = 0;
  int64_t active_after0 = 0;
};

Reference ResidentReference(Backend& sim, bool pregate, int batch) {
  auto model = testing::RandomModel(sim, Config(pregate), 5).value();
  RecordingResident resident;
  Reference ref;
  ref.greedy = Decode(*model, resident, batch);
  ref.stats = resident.stats();
  ref.active_in_layer0 = resident.active_in_layer0;
  ref.active_after0 = resident.active_after0;
  EXPECT_EQ(ref.greedy.tokens.size(), static_cast<size_t>(8 * batch));
  EXPECT_EQ(ref.active_in_layer0 + ref.active_after0, ref.stats.experts_run);
  return ref;
}

void ExpectSameAsResident(const Greedy& got, const Reference& ref, const ExpertProvider& p) {
  EXPECT_EQ(got.tokens, ref.greedy.tokens);
  ASSERT_EQ(got.logits.size(), ref.greedy.logits.size());
  EXPECT_LE(MaxRelError(got.logits, ref.greedy.logits), 1e-5);
  EXPECT_EQ(p.stats().experts_run, ref.stats.experts_run);
  EXPECT_EQ(p.stats().rows, ref.stats.rows);
  EXPECT_EQ(p.stats().steps, ref.stats.steps);
}

void ExpectBytesAddUp(const TransferStats& t, const ExpertProvider& p, const ExpertLayout& l) {
  // Chunk by chunk; a task still copying when the test looks has some of its chunks counted.
  EXPECT_EQ(t.bytes_host_to_device, t.chunks_copied * l.chunk_bytes());
  EXPECT_GE(t.bytes_host_to_device, t.tasks_completed * l.expert_bytes());
  EXPECT_GT(p.stats().bytes_host_to_device, 0);
  EXPECT_LE(p.stats().bytes_host_to_device, static_cast<int64_t>(t.bytes_host_to_device));
  EXPECT_EQ(t.tasks_failed, 0u);
}

void Print(const char* what, int batch, const ExpertProvider& p, const TransferStats& t) {
  std::printf(
      "%s batch %d: %lld steps, %lld experts run, %llu fetched (%.2f MiB), %llu hits, %llu "
      "cancelled, stalled %.2f ms\n",
      what, batch, static_cast<long long>(p.stats().steps),
      static_cast<long long>(p.stats().experts_run),
      static_cast<unsigned long long>(t.tasks_completed),
      static_cast<double>(t.bytes_host_to_device) / (1 << 20),
      static_cast<unsigned long long>(t.hits), static_cast<unsigned long long>(t.tasks_cancelled),
      p.stats().stall_seconds * 1e3);
}

class PrefetchPoliciesTest : public ::testing::TestWithParam<int> {};

TEST_P(PrefetchPoliciesTest, PrefetchAllEqualsResidentAndPrefetchesEveryExpertOfTheNextLayer) {
  const int batch = GetParam();
  auto sim = MakeSim(/*gbps=*/2.0, size_t{256} << 20);
  const Reference ref = ResidentReference(*sim, /*pregate=*/false, batch);

  auto model = testing::RandomModel(*sim, Config(false), 5).value();
  PrefetchAllExpertProvider provider;
  const Greedy got = Decode(*model, provider, batch);
  ExpectSameAsResident(got, ref, provider);
  EXPECT_EQ(provider.cache().num_slots(), 2 * kExperts) << "default: two layers' experts";

  const TransferStats t = provider.transfer_stats();
  Print("prefetch-all", batch, provider, t);
  ExpectBytesAddUp(t, provider, provider.cache().layout());
  // Every expert of every MoE layer was enqueued once per step (layer 0 at BeginStep, m + 1 as
  // RunExperts(m) began) ...
  EXPECT_EQ(t.tasks_queued, static_cast<uint64_t>(provider.stats().steps * kMoeLayers * kExperts));
  // ... so when a layer ran, every expert it activated had been asked for already: each HIGH
  // Enqueue of RunExpertsFromSlots was a hit (no cache: a hit is the prefetch's pinned entry).
  EXPECT_EQ(t.hits, static_cast<uint64_t>(provider.stats().experts_run));
  EXPECT_EQ(t.tasks_cancelled, 0u) << "MoE-Prefetch moves every expert";
}

TEST_P(PrefetchPoliciesTest, RingEqualsResidentAndHoldsTheNextKLayers) {
  const int batch = GetParam();
  auto sim = MakeSim(/*gbps=*/2.0, size_t{256} << 20);
  const Reference ref = ResidentReference(*sim, /*pregate=*/false, batch);

  // K = 2 (the default), K = 1 (serial: a layer loads when the previous one has run) and K = 3
  // (from the slot count).
  for (const int slots : {0, kExperts, 3 * kExperts}) {
    SCOPED_TRACE("slots " + std::to_string(slots));
    auto model = testing::RandomModel(*sim, Config(false), 5).value();
    RingExpertProvider provider({.num_slots = slots});
    const Greedy got = Decode(*model, provider, batch);
    ExpectSameAsResident(got, ref, provider);
    const int k = slots == 0 ? 2 : slots / kExperts;
    EXPECT_EQ(provider.ring_layers(), k);
    EXPECT_EQ(provider.cache().num_slots(), k * kExperts);

    const TransferStats t = provider.transfer_stats();
    Print(("ring K=" + std::to_string(k)).c_str(), batch, provider, t);
    ExpectBytesAddUp(t, provider, provider.cache().layout());
    // K layers to start, then one layer per MoE layer run (the ring wraps into the next step).
    EXPECT_EQ(t.tasks_queued,
              static_cast<uint64_t>((k + provider.stats().steps * kMoeLayers) * kExperts));
    // Each layer was in the ring (loads queued) before it ran.
    EXPECT_EQ(t.hits, static_cast<uint64_t>(provider.stats().experts_run));
  }
}

TEST_P(PrefetchPoliciesTest, PregatedEqualsResidentAndMovesExactlyThePregateSelection) {
  const int batch = GetParam();
  auto sim = MakeSim(/*gbps=*/2.0, size_t{256} << 20);
  const Reference ref = ResidentReference(*sim, /*pregate=*/true, batch);

  auto model = testing::RandomModel(*sim, Config(true), 5).value();
  // The test model is pre-gated: MoE layers 1.. route by the pre-gate of the layer before.
  ASSERT_TRUE(model->config().pregate);
  for (int m = 0; m < kMoeLayers; ++m) {
    EXPECT_EQ(model->moe_layer(m).has_gate(), m == 0) << m;
    EXPECT_EQ(model->moe_layer(m).has_pregate(), m + 1 < kMoeLayers) << m;
  }
  PregatedExpertProvider provider;
  const Greedy got = Decode(*model, provider, batch);
  ExpectSameAsResident(got, ref, provider);
  EXPECT_EQ(provider.cache().num_slots(), 2 * kExperts) << "default: 2 * E";

  const TransferStats t = provider.transfer_stats();
  const PregatedStats& p = provider.pregated_stats();
  Print("pregated", batch, provider, t);
  ExpectBytesAddUp(t, provider, provider.cache().layout());
  std::printf("pregated batch %d: %lld selected, %lld prefetched, %lld on demand, peak %d slots\n",
              batch, static_cast<long long>(p.selected), static_cast<long long>(p.prefetched),
              static_cast<long long>(p.on_demand), p.peak_slots);
  // The pre-gates selected exactly the experts layers 1.. then ran, all of them were migrated
  // before their layer ran, and only layer 0's were fetched on demand.
  EXPECT_EQ(p.selected, ref.active_after0);
  EXPECT_EQ(p.prefetched, ref.active_after0);
  EXPECT_EQ(p.prefetch_skipped, 0);
  EXPECT_EQ(p.on_demand, ref.active_in_layer0);
  // Nothing else moved: bytes = activated experts x expert bytes, as ondemand's, none cancelled.
  EXPECT_EQ(t.tasks_queued, static_cast<uint64_t>(ref.stats.experts_run));
  EXPECT_EQ(t.tasks_completed, static_cast<uint64_t>(ref.stats.experts_run));
  EXPECT_EQ(t.bytes_host_to_device, static_cast<uint64_t>(ref.stats.experts_run) *
                                        provider.cache().layout().expert_bytes());
  EXPECT_EQ(provider.stats().bytes_host_to_device, static_cast<int64_t>(t.bytes_host_to_device));
  // Every expert of layers 1.. was a hit when its layer ran.
  EXPECT_EQ(t.hits, static_cast<uint64_t>(ref.active_after0));
  // Two blocks' active experts: 2 * top_k for a decode step at batch 1.
  EXPECT_LE(p.peak_slots, 2 * kExperts);
  EXPECT_GE(p.peak_slots, 2 * kTopK);
}

INSTANTIATE_TEST_SUITE_P(Batch, PrefetchPoliciesTest, ::testing::Values(1, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "B" + std::to_string(info.param);
                         });

TEST(PrefetchPoliciesTest, PregatedWithTheMinimumSlotsStillEqualsResident) {
  // 2 * top_k slots: a prefill's blocks do not fit; the rest is fetched on demand.
  auto sim = MakeSim(/*gbps=*/4.0, size_t{256} << 20);
  const Reference ref = ResidentReference(*sim, /*pregate=*/true, 3);
  auto model = testing::RandomModel(*sim, Config(true), 5).value();
  PregatedExpertProvider provider({.num_slots = 2 * kTopK});
  const Greedy got = Decode(*model, provider, 3);
  ExpectSameAsResident(got, ref, provider);
  const PregatedStats& p = provider.pregated_stats();
  EXPECT_GT(p.prefetch_skipped, 0);
  EXPECT_LE(p.peak_slots, 2 * kTopK);
  EXPECT_EQ(p.selected, ref.active_after0);
  EXPECT_EQ(p.on_demand, ref.active_in_layer0 + p.prefetch_skipped);
  ExpectBytesAddUp(provider.transfer_stats(), provider, provider.cache().layout());
}

TEST(PrefetchPoliciesTest, TooFewSlotsNameTheMinimum) {
  auto sim = MakeSim(/*gbps=*/4.0, size_t{256} << 20);
  struct Case {
    const char* policy;
    int slots;
    bool pregate;
    std::string minimum;
  };
  for (const Case& c : {Case{"prefetch-all", 2 * kExperts - 1, false, "at least 12 "},
                        Case{"ring", kExperts - 1, false, "at least 6 "},
                        Case{"pregated", 2 * kTopK - 1, true, "at least 4 "}}) {
    SCOPED_TRACE(c.policy);
    auto model = testing::RandomModel(*sim, Config(c.pregate), 5).value();
    ExpertPolicyOptions options;
    options.device_slots = c.slots;
    auto provider = MakeExpertProvider(c.policy, options).value();
    EXPECT_EQ(provider->name(), c.policy);
    const Status status = provider->Install(*model);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find(c.minimum), std::string::npos) << status.ToString();
  }
  // pregated on a model without pre-gates.
  auto model = testing::RandomModel(*sim, Config(false), 5).value();
  auto pregated = MakeExpertProvider("pregated").value();
  const Status status = pregated->Install(*model);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
}

TEST(PrefetchPoliciesTest, MakeExpertProviderHonoursSlotsAndCache) {
  auto sim = MakeSim(/*gbps=*/4.0, size_t{256} << 20);
  const Reference ref = ResidentReference(*sim, /*pregate=*/true, 1);
  for (const char* policy : {"prefetch-all", "ring", "pregated"}) {
    SCOPED_TRACE(policy);
    auto model = testing::RandomModel(*sim, Config(true), 5).value();
    ExpertPolicyOptions options;
    options.device_slots = 3 * kExperts;
    options.device_cache = "lru";
    auto provider = MakeExpertProvider(policy, options).value();
    const Greedy got = Decode(*model, *provider, 1);
    ExpectSameAsResident(got, ref, *provider);
    EXPECT_GT(provider->stats().bytes_host_to_device, 0);
  }
}

}  // namespace
}  // namespace sy::offload
