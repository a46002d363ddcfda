// The ondemand policy: greedy decoding through OnDemandExpertProvider on the sim backend, with
// fewer device expert slots than the model has experts, gives the same tokens and logits as the
// resident provider; every fetched byte is accounted for by the sim link.
#include "inference/offload/ondemand_expert_provider.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "inference/kv_cache_decoder.h"
#include "inference/resident_expert_provider.h"
#include "tests/inference/decoder_test_util.h"
#include "tests/inference/offload/offload_test_util.h"

namespace sy::offload {
namespace {

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
  std::vector<float> logits;  // every step's logits, concatenated
};

Greedy Decode(MoeModel& model, ExpertProvider& provider) {
  Greedy out;
  auto decoder = KvCacheDecoder::Create(model, 24, 1, &provider);
  EXPECT_TRUE(decoder.ok()) << decoder.status().ToString();
  if (!decoder.ok()) return out;
  const std::vector<int32_t> prompt = {3, 17, 22, 5, 39};
  Result<std::vector<float>> logits = (*decoder)->Prefill(0, prompt);
  const int64_t vocab = model.config().vocab_size;
  for (int step = 0; step < 8 && logits.ok(); ++step) {
    out.logits.insert(out.logits.end(), logits->end() - vocab, logits->end());
    const int32_t next = static_cast<int32_t>(
        std::max_element(logits->end() - vocab, logits->end()) - (logits->end() - vocab));
    out.tokens.push_back(next);
    logits = (*decoder)->Decode(std::vector<int32_t>{next});
  }
  EXPECT_TRUE(logits.ok()) << logits.status().ToString();
  return out;
}

TEST(OnDemandExpertProviderTest, GreedyDecodeEqualsResidentWithFewerSlotsThanExperts) {
  auto sim = MakeSim(/*gbps=*/4.0, size_t{256} << 20);
  const ModelConfig config = Config();
  auto resident_model = testing::RandomModel(*sim, config, 5).value();
  ResidentExpertProvider resident;
  const Greedy expected = Decode(*resident_model, resident);
  ASSERT_EQ(expected.tokens.size(), 8u);

  // 3 and 6 slots for 2 MoE layers x 6 experts.
  for (DeviceCachePolicy policy : {DeviceCachePolicy::kNone, DeviceCachePolicy::kLru}) {
    SCOPED_TRACE(DeviceCachePolicyName(policy));
    auto model = testing::RandomModel(*sim, config, 5).value();
    const int slots = policy == DeviceCachePolicy::kNone ? 3 : 6;
    OnDemandExpertProvider ondemand({.num_slots = slots, .cache_policy = policy});
    sim->ResetLinkStats();
    const Greedy got = Decode(*model, ondemand);
    EXPECT_EQ(got.tokens, expected.tokens);
    ASSERT_EQ(got.logits.size(), expected.logits.size());
    EXPECT_LE(MaxRelError(got.logits, expected.logits), 1e-5);

    EXPECT_EQ(ondemand.stats().experts_run, resident.stats().experts_run);
    EXPECT_EQ(ondemand.stats().rows, resident.stats().rows);
    const TransferStats transfers = ondemand.transfer_stats();
    const ExpertLayout& layout = ondemand.cache().layout();
    EXPECT_EQ(transfers.bytes_host_to_device, transfers.tasks_completed * layout.expert_bytes());
    EXPECT_EQ(ondemand.stats().bytes_host_to_device,
              static_cast<int64_t>(transfers.bytes_host_to_device));
    EXPECT_GT(ondemand.stats().stall_seconds, 0.0);
    // The link carried the experts plus the decoder's own uploads (token ids, positions).
    EXPECT_GE(sim->host_to_device_stats().bytes, transfers.bytes_host_to_device);
    const DeviceCacheStats cache = ondemand.cache().stats();
    std::printf(
        "%s: %lld experts run, %llu hits, %llu fetched (%.2f MiB), stalled %.2f ms; "
        "tokens %d %d %d ...\n",
        DeviceCachePolicyName(policy), static_cast<long long>(ondemand.stats().experts_run),
        static_cast<unsigned long long>(cache.hits),
        static_cast<unsigned long long>(transfers.tasks_completed),
        static_cast<double>(transfers.bytes_host_to_device) / (1 << 20),
        ondemand.stats().stall_seconds * 1e3, got.tokens[0], got.tokens[1], got.tokens[2]);
    EXPECT_EQ(cache.hits + cache.misses, static_cast<uint64_t>(ondemand.stats().experts_run));
    if (policy == DeviceCachePolicy::kNone) {
      EXPECT_EQ(cache.hits, 0u) << "without a cache every activated expert is fetched";
      EXPECT_EQ(transfers.tasks_completed, static_cast<uint64_t>(ondemand.stats().experts_run));
    } else {
      EXPECT_GT(cache.hits, 0u) << "6 LRU slots keep some of the 4 experts a token uses";
      EXPECT_EQ(transfers.tasks_completed, cache.misses);
    }
  }
}

}  // namespace
}  // namespace sy::offload
