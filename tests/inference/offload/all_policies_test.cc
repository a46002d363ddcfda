// Every registered expert policy (ExpertPolicyNames(): whatever is registered when this is built,
// and the ablation variants, ExpertPolicyVariants())
// against resident, on the sim backend with a throttled link and a small f32 model with
// pre-gates (so `pregated` has them): greedy decoding at batch 1 and at batch 3 (prompts of
// different lengths, prefilled one after another, then batched decode steps) gives exactly
// resident's tokens, and every logit of the prefills and of the decode steps is within 1e-5.
//
// Each non-resident policy runs twice: on a model that holds its experts on the device (the
// policy copies them to its host tier), and on one built without routed experts
// (ModelOptions::routed_experts = false, the loader's experts_on_host path) whose host tier is
// given with set_host_experts. Policies get few device slots (4 of 3 x 6 experts) where they
// accept them; a policy that refuses that at Install gets 12, then its defaults (logged).
//
// Every policy but resident offloads, and its counters say so:
//   - a policy that only copies experts (ondemand, prefetch-all, ring, pregated, predictive and its
//     variants) moved expert bytes to the device: stats().bytes_host_to_device > 0;
//   - a policy that also runs experts on the CPU (MixedExpertProvider: cpu-compute, hot-cold,
//     layer-split) ran some expert off the device, fetched or on the CPU; it counts bytes moved
//     exactly when it fetched an expert. Such a policy may move no weights while serving here:
//     hot-cold:all-cpu never copies, layer-split's 4 slots hold no whole layer, and cpu-compute's
//     latency model (calibrated on this machine) may find the CPU faster than any copy. Their
//     static placement at Install is placement_bytes(), not counted, as resident's load is not;
//   - no policy counts more bytes than the sim link carried host to device from Install on.
// resident moves none: its counter stays 0 and, during its decode, the link carries less than one
// expert's bytes (token ids and positions only).
//
// Quantized experts (q8_0, q4_0) decode as the f32 model of their dequantized values (up to the
// rounding of their inputs to 8 bits), and ondemand moves their blocks: the byte count of the f32
// run times 34/128 or 18/128.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "inference/expert_policy.h"
#include "inference/kv_cache_decoder.h"
#include "inference/offload/mixed_expert_provider.h"
#include "inference/resident_expert_provider.h"
#include "runtime/model/host_transfer.h"
#include "tests/inference/decoder_test_util.h"
#include "tests/inference/offload/offload_test_util.h"

namespace sy::offload {
namespace {

constexpr uint64_t kSeed = 11;

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
  c.first_k_dense = 1;  // MoE index != decoder layer
  c.num_shared_experts = 1;
  c.pregate = true;
  return c;
}

struct Greedy {
  std::vector<std::vector<int32_t>> tokens;  // [batch][steps]
  std::vector<float> logits;                 // every prefill's and every step's, concatenated
};

const std::vector<std::vector<int32_t>>& Prompts(int batch) {
  static const std::vector<std::vector<int32_t>> one = {{3, 17, 22, 5, 39}};
  static const std::vector<std::vector<int32_t>> three = {
      {3, 17, 22, 5, 39}, {44, 2, 9}, {12, 30, 7, 7, 1, 46, 25}};
  return batch == 1 ? one : three;
}

constexpr int kSteps = 6;

Result<Greedy> Decode(MoeModel& model, ExpertProvider& provider, int batch) {
  Greedy out;
  const std::vector<std::vector<int32_t>>& prompts = Prompts(batch);
  SY_ASSIGN_OR_RETURN(auto decoder, KvCacheDecoder::Create(model, 24, batch, &provider));
  const int64_t vocab = model.config().vocab_size;
  out.tokens.resize(static_cast<size_t>(batch));
  for (int b = 0; b < batch; ++b) {
    SY_ASSIGN_OR_RETURN(std::vector<float> logits,
                        decoder->Prefill(b, prompts[static_cast<size_t>(b)]));
    out.logits.insert(out.logits.end(), logits.begin(), logits.end());
    const auto last = logits.end() - vocab;
    out.tokens[static_cast<size_t>(b)].push_back(
        static_cast<int32_t>(std::max_element(last, logits.end()) - last));
  }
  for (int step = 1; step < kSteps; ++step) {
    std::vector<int32_t> next;
    for (const auto& seq : out.tokens) next.push_back(seq.back());
    SY_ASSIGN_OR_RETURN(std::vector<float> logits, decoder->Decode(next));
    out.logits.insert(out.logits.end(), logits.begin(), logits.end());
    for (int b = 0; b < batch; ++b) {
      const auto row = logits.begin() + b * vocab;
      out.tokens[static_cast<size_t>(b)].push_back(
          static_cast<int32_t>(std::max_element(row, row + vocab) - row));
    }
  }
  return out;
}

// The same random weights without routed experts: every other parameter has the same name, and
// InitializeParameters depends only on (seed, name).
std::unique_ptr<MoeModel> ModelWithoutExperts(Backend& backend) {
  ModelOptions options;
  options.with_grad = false;
  options.routed_experts = false;
  auto model = MoeModel::Create(backend, Config(), options).value();
  SY_CHECK_OK(model->InitializeParameters(kSeed, 0.3f));
  return model;
}

// Parameters: (policy, batch).
class AllPoliciesTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  const std::string& policy() const { return std::get<0>(GetParam()); }
  int batch() const { return std::get<1>(GetParam()); }

  void SetUp() override {
    sim_ = MakeSim(/*gbps=*/2.0, size_t{256} << 20, /*latency_us=*/10.0);
    reference_model_ = testing::RandomModel(*sim_, Config(), kSeed).value();
    expert_bytes_ = static_cast<int64_t>(ExpertLayoutOf(*reference_model_).value().expert_bytes());
    ASSERT_TRUE(resident_.Install(*reference_model_).ok());
    sim_->ResetLinkStats();
    Result<Greedy> expected = Decode(*reference_model_, resident_, batch());
    ASSERT_TRUE(expected.ok()) << expected.status().ToString();
    expected_ = std::move(*expected);
    ExpectNoExpertMoved(resident_, "resident (the reference)");
    host_ = HostExperts::FromModel(*reference_model_).value();
  }

  // What resident's decode may move host to device: token ids and positions, never an expert.
  void ExpectNoExpertMoved(const ExpertProvider& provider, const std::string& what) {
    const auto link_bytes = static_cast<int64_t>(sim_->host_to_device_stats().bytes);
    std::printf("%s: %lld bytes host to device over the link during decode\n", what.c_str(),
                static_cast<long long>(link_bytes));
    EXPECT_EQ(provider.stats().bytes_host_to_device, 0) << what;
    EXPECT_LT(link_bytes, expert_bytes_) << what << " moved expert weights to the device";
  }

  void ExpectSameAsResident(const std::string& policy, bool without_experts) {
    SCOPED_TRACE(policy + (without_experts ? " (model without routed experts)" : ""));
    std::unique_ptr<MoeModel> model;
    std::unique_ptr<ExpertProvider> provider;
    // Small slot counts first. A refusal at Install may leave the model half-installed, so each
    // try gets a fresh model.
    for (const int slots : {4, 12, 0}) {
      ExpertPolicyOptions options;
      options.device_slots = slots;
      Result<std::unique_ptr<ExpertProvider>> made = MakeExpertProvider(policy, options);
      if (!made.ok()) {
        std::printf("%s: %d slots refused: %s\n", policy.c_str(), slots,
                    made.status().ToString().c_str());
        continue;
      }
      model = without_experts ? ModelWithoutExperts(*sim_)
                              : testing::RandomModel(*sim_, Config(), kSeed).value();
      if (without_experts) (*made)->set_host_experts(host_);
      // From here on the link carries what the policy moves (its copies at Install included).
      sim_->ResetLinkStats();
      const Status installed = (*made)->Install(*model);
      if (installed.ok()) {
        std::printf("%s: %d device slots (0: its default)%s\n", policy.c_str(), slots,
                    without_experts ? ", host tier given" : "");
        provider = std::move(*made);
        break;
      }
      std::printf("%s: %d slots refused at Install: %s\n", policy.c_str(), slots,
                  installed.ToString().c_str());
    }
    ASSERT_NE(provider, nullptr) << policy << " could not be installed";
    Result<Greedy> got = Decode(*model, *provider, batch());
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->tokens, expected_.tokens);
    ASSERT_EQ(got->logits.size(), expected_.logits.size());
    EXPECT_LE(MaxRelError(got->logits, expected_.logits), 1e-5);
    EXPECT_EQ(provider->stats().experts_run, resident_.stats().experts_run);
    EXPECT_EQ(provider->stats().rows, resident_.stats().rows);
    const int64_t moved = provider->stats().bytes_host_to_device;
    if (policy == "resident") {
      ExpectNoExpertMoved(*provider, policy);
    } else if (const auto* mixed = dynamic_cast<const MixedExpertProvider*>(provider.get())) {
      const PlacementStats& placed = mixed->placement_stats();
      std::printf("%s: %s, placement %llu bytes\n", policy.c_str(), placed.ToString().c_str(),
                  static_cast<unsigned long long>(mixed->placement_bytes()));
      EXPECT_GT(placed.fetched_experts + placed.cpu_experts, 0)
          << policy << " ran every expert from the device, as resident does";
      EXPECT_EQ(moved > 0, placed.fetched_experts > 0)
          << policy << ": " << moved << " bytes moved for " << placed.fetched_experts
          << " fetched experts";
    } else {
      EXPECT_GT(moved, 0) << policy << " offloads experts but reports no bytes moved to the device";
    }
    EXPECT_LE(moved, static_cast<int64_t>(sim_->host_to_device_stats().bytes))
        << policy << " reports more bytes moved than the link carried";
    std::printf(
        "%s batch %d%s: %lld experts run, %.3f MiB host to device (the link: %.3f MiB), %.2f ms "
        "stalled\n",
        policy.c_str(), batch(), without_experts ? " (host tier given)" : "",
        static_cast<long long>(provider->stats().experts_run),
        static_cast<double>(provider->stats().bytes_host_to_device) / (1 << 20),
        static_cast<double>(sim_->host_to_device_stats().bytes) / (1 << 20),
        provider->stats().stall_seconds * 1e3);
  }

  std::unique_ptr<SimBackend> sim_;
  std::unique_ptr<MoeModel> reference_model_;
  ResidentExpertProvider resident_;
  int64_t expert_bytes_ = 0;  // one routed expert's weights
  Greedy expected_;
  std::shared_ptr<HostExperts> host_;
};

TEST_P(AllPoliciesTest, GivesResidentsTokensAndLogits) {
  ASSERT_EQ(expected_.tokens.size(), static_cast<size_t>(batch()));
  ExpectSameAsResident(policy(), /*without_experts=*/false);
  if (policy() != "resident") ExpectSameAsResident(policy(), /*without_experts=*/true);
}

std::vector<std::string> RegisteredPolicies() {
  std::vector<std::string> names;
  for (const std::string_view name : ExpertPolicyNames()) names.emplace_back(name);
  // The ablation variants the benchmarks run (predictive:prefetch, hot-cold:all-cpu, ...).
  for (const std::string& spec : ExpertPolicyVariants()) names.push_back(spec);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Registered, AllPoliciesTest,
                         ::testing::Combine(::testing::ValuesIn(RegisteredPolicies()),
                                            ::testing::Values(1, 3)),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
                           std::string name = std::get<0>(info.param) + "_batch" +
                                              std::to_string(std::get<1>(info.param));
                           for (char& c : name) {
                             if (c == '-' || c == ':') c = '_';
                           }
                           return name;
                         });

TEST(AllPoliciesListTest, ResidentAndOndemandAreRegistered) {
  const std::vector<std::string> names = RegisteredPolicies();
  EXPECT_NE(std::find(names.begin(), names.end(), "resident"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "ondemand"), names.end());
}

TEST(ModelWithoutRoutedExpertsTest, ResidentFailsClearlyAndTheDeviceHoldsNoExperts) {
  auto sim = MakeSim(/*gbps=*/2.0, size_t{256} << 20);
  const auto in_use = [&] { return static_cast<int64_t>(sim->memory_stats().bytes_in_use); };
  const int64_t before = in_use();
  auto full = testing::RandomModel(*sim, Config(), kSeed).value();
  const int64_t with_experts = in_use() - before;
  const ExpertLayout layout = ExpertLayoutOf(*full).value();
  full.reset();
  const int64_t before_bare = in_use();
  auto bare = ModelWithoutExperts(*sim);
  const int64_t without_experts = in_use() - before_bare;
  const auto expert_bytes =
      static_cast<int64_t>(layout.num_layers * layout.num_experts * layout.expert_bytes());
  std::printf("device bytes: %lld with routed experts, %lld without; experts %lld\n",
              static_cast<long long>(with_experts), static_cast<long long>(without_experts),
              static_cast<long long>(expert_bytes));
  EXPECT_GE(with_experts - without_experts, expert_bytes);
  for (const Parameter& p : bare->parameters()) EXPECT_FALSE(p.is_expert) << p.name;

  ResidentExpertProvider resident;
  Result<Greedy> got = Decode(*bare, resident, 1);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition) << got.status().ToString();
  EXPECT_NE(got.status().ToString().find("without its routed experts"), std::string::npos)
      << got.status().ToString();
}

// Quantized experts (ModelOptions::expert_weight_dtype) through the offload stack: the model of
// Config() with rows of whole blocks, its experts in q8_0 or q4_0, everything else f32.
ModelConfig BlockConfig() {
  ModelConfig c = Config();
  c.hidden_size = 64;
  c.intermediate_size = 48;
  c.moe_intermediate_size = 32;
  c.pregate = false;
  return c;
}

std::unique_ptr<MoeModel> BlockModel(Backend& backend, DType experts) {
  ModelOptions options;
  options.with_grad = false;
  options.expert_weight_dtype = experts;
  auto model = MoeModel::Create(backend, BlockConfig(), options).value();
  SY_CHECK_OK(model->InitializeParameters(kSeed, 0.3f));
  return model;
}

// The f32 model holding exactly the values of `quantized`'s blocks.
std::unique_ptr<MoeModel> DequantizedModel(Backend& backend, MoeModel& quantized) {
  auto model = BlockModel(backend, DType::kF32);
  for (const Parameter& p : quantized.parameters()) {
    if (!p.is_expert) continue;
    const Parameter* mine = model->parameters().Find(p.name);
    SY_CHECK(mine != nullptr) << p.name;
    std::vector<float> values = DownloadF32(backend, p.value).value();
    SY_CHECK_OK(CopyFromHost(backend, values, mine->value));
  }
  return model;
}

Result<std::pair<Greedy, int64_t>> DecodeWith(MoeModel& model, const std::string& policy) {
  ExpertPolicyOptions options;
  options.device_slots = 4;
  SY_ASSIGN_OR_RETURN(std::unique_ptr<ExpertProvider> provider,
                      MakeExpertProvider(policy, options));
  SY_RETURN_IF_ERROR(provider->Install(model));
  SY_ASSIGN_OR_RETURN(Greedy greedy, Decode(model, *provider, 3));
  return std::make_pair(std::move(greedy), provider->stats().bytes_host_to_device);
}

// Resident on q8_0 / q4_0 experts gives the tokens of the f32 model of the same values, and its
// logits up to the rounding of the experts' inputs to 8 bits (runtime/core/quant_blocks.h): about
// 4e-3 rms relative per expert product (the backend-ops harness's nmse of 1.5e-5), compounded
// over the layers; observed 0.011 (q8_0) and 0.017 (q4_0) of the largest logit, bounded at 0.05.
// (tests/inference/gguf_oracle.py holds whole models to 1e-4 of a forward that rounds the same
// way.) Ondemand on the quantized model gives resident's tokens and logits, and moves the experts'
// blocks: the same fetches as on the f32 model, each 34 (q8_0) or 18 (q4_0) bytes per 32 values
// instead of 128.
TEST(QuantizedExpertsTest, DecodeAsTheirDequantizedValuesAndMoveTheirBlocks) {
  for (const DType dtype : {DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    auto sim = MakeSim(/*gbps=*/2.0, size_t{256} << 20, /*latency_us=*/10.0);
    auto quantized = BlockModel(*sim, dtype);
    auto dequantized = DequantizedModel(*sim, *quantized);
    EXPECT_EQ(ExpertLayoutOf(*quantized).value().dtype, dtype);
    auto resident_q = DecodeWith(*quantized, "resident").value();
    auto resident_f = DecodeWith(*dequantized, "resident").value();
    EXPECT_EQ(resident_q.first.tokens, resident_f.first.tokens);
    EXPECT_LE(MaxRelError(resident_q.first.logits, resident_f.first.logits), 0.05);

    auto ondemand_q = DecodeWith(*BlockModel(*sim, dtype), "ondemand").value();
    auto ondemand_f = DecodeWith(*DequantizedModel(*sim, *quantized), "ondemand").value();
    EXPECT_EQ(ondemand_q.first.tokens, resident_q.first.tokens);
    EXPECT_LE(MaxRelError(ondemand_q.first.logits, resident_q.first.logits), 1e-5);
    const int64_t block_bytes = static_cast<int64_t>(DTypeBlockBytes(dtype));
    std::printf("%s: ondemand moved %lld bytes, %lld for the same experts in f32\n",
                std::string(DTypeName(dtype)).c_str(), static_cast<long long>(ondemand_q.second),
                static_cast<long long>(ondemand_f.second));
    EXPECT_GT(ondemand_q.second, 0);
    EXPECT_EQ(ondemand_q.second * 128, ondemand_f.second * block_bytes);
  }
}

}  // namespace
}  // namespace sy::offload
