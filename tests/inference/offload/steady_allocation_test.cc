// Every registered expert policy, in steady decode: after warm-up, 40 decode steps of a batch of
// two make no allocator call on the model's backend, device or host (the decoder's workspace
// serves every activation and staging buffer; runtime/backend/workspace.h). The experts come from
// the host tier the loader's experts_on_host path gives (a model without routed experts).
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "inference/expert_policy.h"
#include "inference/kv_cache_decoder.h"
#include "inference/sampler.h"
#include "tests/inference/decoder_test_util.h"
#include "tests/inference/offload/offload_test_util.h"

namespace sy::offload {
namespace {

constexpr uint64_t kSeed = 3;
constexpr int kWarmup = 3, kSteps = 40;

ModelConfig Config() {
  ModelConfig c;
  c.vocab_size = 48;
  c.hidden_size = 32;
  c.num_layers = 4;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.intermediate_size = 24;
  c.num_experts = 6;
  c.moe_intermediate_size = 16;
  c.top_k = 2;
  c.first_k_dense = 1;
  c.pregate = true;
  return c;
}

std::vector<std::string> Policies() {
  std::vector<std::string> names;
  for (const std::string_view name : ExpertPolicyNames()) names.emplace_back(name);
  for (const std::string& spec : ExpertPolicyVariants()) names.push_back(spec);
  return names;
}

class SteadyAllocationTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SteadyAllocationTest, DecodeStepsMakeNoAllocatorCall) {
  const std::string& policy = GetParam();
  auto sim = MakeSim(/*gbps=*/8.0, size_t{256} << 20, /*latency_us=*/5.0);
  std::unique_ptr<MoeModel> reference = testing::RandomModel(*sim, Config(), kSeed).value();
  std::shared_ptr<HostExperts> host = HostExperts::FromModel(*reference).value();
  ModelOptions options;
  options.with_grad = false;
  options.routed_experts = policy == "resident";
  std::unique_ptr<MoeModel> model = MoeModel::Create(*sim, Config(), options).value();
  ASSERT_TRUE(model->InitializeParameters(kSeed, 0.3f).ok());
  ExpertPolicyOptions policy_options;
  policy_options.device_slots = 12;
  Result<std::unique_ptr<ExpertProvider>> provider = MakeExpertProvider(policy, policy_options);
  if (!provider.ok()) provider = MakeExpertProvider(policy);
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();
  if (policy != "resident") (*provider)->set_host_experts(host);
  ASSERT_TRUE((*provider)->Install(*model).ok());
  Result<std::unique_ptr<KvCacheDecoder>> dec =
      KvCacheDecoder::Create(*model, 8 + kWarmup + kSteps, 2, provider->get());
  ASSERT_TRUE(dec.ok()) << dec.status().ToString();
  ASSERT_TRUE((*dec)->Prefill(0, std::vector<int32_t>{3, 17, 22, 5}).ok());
  ASSERT_TRUE((*dec)->Prefill(1, std::vector<int32_t>{44, 2, 9}).ok());
  std::vector<int32_t> next = {7, 11};
  const auto vocab = static_cast<size_t>(Config().vocab_size);
  auto step = [&] {
    Result<std::vector<float>> rows = (*dec)->Decode(next);
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    for (size_t b = 0; b < next.size(); ++b) {
      next[b] = GreedyArgmax(std::span<const float>(rows->data() + b * vocab, vocab));
    }
  };
  for (int i = 0; i < kWarmup; ++i) step();
  const size_t device_before = sim->memory_stats().num_allocs;
  const uint64_t host_before = sim->host_allocations();
  for (int i = 0; i < kSteps && !HasFatalFailure(); ++i) step();
  const size_t device_calls = sim->memory_stats().num_allocs - device_before;
  const uint64_t host_calls = sim->host_allocations() - host_before;
  std::printf("%s: %zu device and %llu host allocator calls in %d decode steps\n", policy.c_str(),
              device_calls, static_cast<unsigned long long>(host_calls), kSteps);
  EXPECT_EQ(device_calls, 0u);
  EXPECT_EQ(host_calls, 0u);
}

INSTANTIATE_TEST_SUITE_P(Registered, SteadyAllocationTest, ::testing::ValuesIn(Policies()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-' || c == ':') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace sy::offload
