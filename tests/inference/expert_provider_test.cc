// ExpertProvider (inference/expert_provider.h) and the resident policy:
//   - a model running through ResidentExpertProvider gives bit-identical logits to the same model
//     on its own experts, for MoeModel::Forward and for KvCacheDecoder prefill and batched decode
//     (plain and pre-gated models; kv_cache_decoder_test compares the decoder through it with
//     MoeModel::Forward);
//   - the routing hook shows exactly the experts a brute-force top-k over the gate logits (or
//     over the previous layer's pre-gate logits, recomputed on the host from the hook's own
//     hidden rows) selects, with per-expert row counts that agree;
//   - a recording provider sees BeginStep, then Routed / RunExperts / ReleaseLayer once per MoE
//     layer in order, then EndStep, for every step; the counters agree with what was recorded;
//   - misuse is refused: a second Install, a second provider, a provider of another model, an
//     unknown policy name, and Backward through a provider.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "inference/expert_policy.h"
#include "inference/kv_cache_decoder.h"
#include "inference/resident_expert_provider.h"
#include "tests/inference/decoder_test_util.h"

namespace sy {
namespace {

ModelConfig Config(bool pregate) {
  ModelConfig c;
  c.vocab_size = 40;
  c.hidden_size = 32;
  c.num_layers = 4;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.intermediate_size = 24;
  c.num_experts = 6;
  c.moe_intermediate_size = 16;
  c.top_k = 2;
  c.first_k_dense = 1;  // a dense layer first: MoE index != decoder layer
  c.num_shared_experts = 1;
  c.pregate = pregate;
  return c;
}

std::unique_ptr<Backend> Cpu() {
  Result<std::unique_ptr<Backend>> backend = CreateBackend(Device::Cpu());
  EXPECT_TRUE(backend.ok()) << backend.status().ToString();
  return std::move(*backend);
}

std::unique_ptr<MoeModel> Model(Backend& backend, const ModelConfig& config) {
  Result<std::unique_ptr<MoeModel>> model = testing::RandomModel(backend, config, 5);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return std::move(*model);
}

using testing::FullLogits;
using testing::ToHost;

// Prefill `prompt` into sequence 0 and `prompt2` into sequence 1, then two batched decode steps;
// every row of logits, concatenated.
std::vector<float> DecodeAll(MoeModel& model, ExpertProvider* provider) {
  Result<std::unique_ptr<KvCacheDecoder>> dec = KvCacheDecoder::Create(model, 12, 2, provider);
  EXPECT_TRUE(dec.ok()) << dec.status().ToString();
  std::vector<float> all;
  auto add = [&](Result<std::vector<float>> rows) {
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    if (rows.ok()) all.insert(all.end(), rows->begin(), rows->end());
  };
  add((*dec)->Prefill(0, std::vector<int32_t>{3, 17, 22, 5, 39}));
  add((*dec)->Prefill(1, std::vector<int32_t>{8, 30, 1}));
  add((*dec)->Decode(std::vector<int32_t>{0, 11}));
  add((*dec)->Decode(std::vector<int32_t>{7, 2}));
  return all;
}

// Records the hooks, and in Routed copies what the hook shows to the host.
class RecordingProvider final : public ResidentExpertProvider {
 public:
  struct Routing {
    int moe_index = 0;
    int layer = 0;
    int64_t tokens = 0;
    std::vector<float> h;  // [N, H]
    std::vector<int32_t> slot_experts;
    std::vector<int64_t> group_rows;
    std::vector<float> next_pregate_logits;  // [N, E] or empty
  };
  std::vector<std::string> events;
  std::vector<Routing> routings;
  int64_t experts_seen = 0, rows_seen = 0;

 protected:
  Status OnBeginStep(Backend& backend, const ExpertStep& step) override {
    events.push_back("begin " + std::to_string(step.num_tokens) + (step.prefill ? " p" : " d"));
    return ResidentExpertProvider::OnBeginStep(backend, step);
  }
  Status OnEndStep(Backend& backend) override {
    events.push_back("end");
    return ResidentExpertProvider::OnEndStep(backend);
  }
  Status Routed(Backend& backend, const MoeRouting& r) override {
    events.push_back("routed " + std::to_string(r.moe_index));
    Routing rec;
    rec.moe_index = r.moe_index;
    rec.layer = r.layer;
    rec.tokens = r.routing->h.dim(0);
    rec.h = ToHost(backend, r.routing->h);
    rec.slot_experts.assign(r.routing->slot_experts.begin(), r.routing->slot_experts.end());
    rec.group_rows = r.routing->plan->group_rows;
    if (r.routing->next_pregate_logits.defined()) {
      rec.next_pregate_logits = ToHost(backend, r.routing->next_pregate_logits);
    }
    routings.push_back(std::move(rec));
    return Status::Ok();
  }
  Status RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                    std::span<const int64_t> group_rows, const Tensor& ys) override {
    events.push_back("run " + std::to_string(moe_index));
    for (const int64_t g : group_rows) {
      experts_seen += g > 0 ? 1 : 0;
      rows_seen += g;
    }
    return ResidentExpertProvider::RunExperts(backend, moe_index, xs, group_rows, ys);
  }
  void ReleaseLayer(int moe_index) override {
    events.push_back("release " + std::to_string(moe_index));
    ResidentExpertProvider::ReleaseLayer(moe_index);
  }
};

// logits[n, e] = h[n] . W[e] in double (W [E, H] from the parameter store).
std::vector<double> HostLogits(MoeModel& model, const std::string& weight,
                               const std::vector<float>& h) {
  const Parameter* p = model.parameters().Find(weight);
  EXPECT_NE(p, nullptr) << weight;
  const std::vector<float> w = ToHost(model.backend(), p->value);
  const int64_t e = p->value.dim(0), hid = p->value.dim(1);
  const int64_t n = static_cast<int64_t>(h.size()) / hid;
  std::vector<double> out(static_cast<size_t>(n * e), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t x = 0; x < e; ++x) {
      double s = 0;
      for (int64_t j = 0; j < hid; ++j) {
        s += static_cast<double>(h[static_cast<size_t>(i * hid + j)]) *
             static_cast<double>(w[static_cast<size_t>(x * hid + j)]);
      }
      out[static_cast<size_t>(i * e + x)] = s;
    }
  }
  return out;
}

// The hook's choice for each token must be the top-k of `logits` (descending). Where two
// candidates are within rounding of each other (f32 GEMM vs double here) either order is
// accepted, but the chosen experts must still be a top-k by value.
void ExpectTopK(const std::vector<double>& logits, const std::vector<int32_t>& slot_experts, int e,
                int k, int* exact_tokens) {
  const size_t n = logits.size() / static_cast<size_t>(e);
  ASSERT_EQ(slot_experts.size(), n * static_cast<size_t>(k));
  for (size_t i = 0; i < n; ++i) {
    const double* row = logits.data() + i * static_cast<size_t>(e);
    std::vector<int> order(static_cast<size_t>(e));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
    bool near_tie = false;
    for (int j = 0; j < k && j + 1 < e; ++j) {
      near_tie |=
          row[order[static_cast<size_t>(j)]] - row[order[static_cast<size_t>(j) + 1]] < 1e-4;
    }
    const int32_t* got = slot_experts.data() + i * static_cast<size_t>(k);
    if (!near_tie) {
      for (int j = 0; j < k; ++j) EXPECT_EQ(got[j], order[static_cast<size_t>(j)]) << "token " << i;
      ++*exact_tokens;
      continue;
    }
    const double kth = row[order[static_cast<size_t>(k) - 1]];
    for (int j = 0; j < k; ++j) EXPECT_GE(row[got[j]], kth - 1e-4) << "token " << i;
  }
}

class ExpertProviderTest : public ::testing::TestWithParam<bool> {};  // param: pre-gated

TEST_P(ExpertProviderTest, ResidentIsBitIdenticalToTheModelsOwnExperts) {
  std::unique_ptr<Backend> backend = Cpu();
  const ModelConfig config = Config(GetParam());
  std::unique_ptr<MoeModel> own = Model(*backend, config);
  ResidentExpertProvider provider;
  std::unique_ptr<MoeModel> through = Model(*backend, config);
  ASSERT_TRUE(provider.Install(*through).ok());

  const std::vector<int32_t> ids = {3, 17, 22, 5, 39, 0, 11, 8};
  const std::vector<float> want = FullLogits(*own, ids);
  EXPECT_EQ(FullLogits(*through, ids), want);
  const std::vector<float> own_decode = DecodeAll(*own, nullptr);
  const std::vector<float> provider_decode = DecodeAll(*through, &provider);
  ASSERT_EQ(own_decode.size(), provider_decode.size());
  EXPECT_EQ(own_decode, provider_decode);
  EXPECT_EQ(provider.stats().steps, 4);
  EXPECT_EQ(provider.stats().bytes_host_to_device, 0);
  EXPECT_EQ(provider.stats().stall_seconds, 0.0);

  // (kv_cache_decoder_test checks the decoder through the provider against the full forward.)
}

TEST_P(ExpertProviderTest, HooksSeeTheRoutersChoiceOncePerLayerPerStep) {
  std::unique_ptr<Backend> backend = Cpu();
  const ModelConfig config = Config(GetParam());
  std::unique_ptr<MoeModel> model = Model(*backend, config);
  RecordingProvider provider;
  const std::vector<float> rows = DecodeAll(*model, &provider);
  ASSERT_FALSE(rows.empty());

  const int num_moe = config.NumMoeLayers();
  ASSERT_EQ(num_moe, 3);
  std::vector<std::string> want;
  for (const int64_t tokens : {5, 3, 2, 2}) {
    want.push_back("begin " + std::to_string(tokens) + (tokens > 2 ? " p" : " d"));
    for (int m = 0; m < num_moe; ++m) {
      for (const char* what : {"routed ", "run ", "release "}) {
        want.push_back(what + std::to_string(m));
      }
    }
    want.push_back("end");
  }
  EXPECT_EQ(provider.events, want);

  ASSERT_EQ(provider.routings.size(), static_cast<size_t>(4 * num_moe));
  const int e = config.num_experts, k = config.top_k;
  int exact_tokens = 0, tokens = 0;
  int64_t rows_routed = 0;
  for (size_t i = 0; i < provider.routings.size(); ++i) {
    const RecordingProvider::Routing& r = provider.routings[i];
    SCOPED_TRACE("routing " + std::to_string(i));
    EXPECT_EQ(r.layer, config.first_k_dense + r.moe_index);
    // Dropless: every slot is a row of its expert.
    std::vector<int64_t> histogram(static_cast<size_t>(e), 0);
    for (const int32_t x : r.slot_experts) ++histogram[static_cast<size_t>(x)];
    EXPECT_EQ(r.group_rows, histogram);
    rows_routed += r.tokens * k;
    tokens += static_cast<int>(r.tokens);

    const std::string layer = "layers/" + std::to_string(r.layer) + "/moe/";
    std::vector<double> logits;
    if (config.MoeLayerHasGate(r.moe_index)) {
      logits = HostLogits(*model, layer + "gate", r.h);
    } else {
      // Routed by the previous MoE layer's pre-gate over that layer's input rows.
      const RecordingProvider::Routing& prev = provider.routings[i - 1];
      ASSERT_EQ(prev.moe_index, r.moe_index - 1);
      logits = HostLogits(*model, "layers/" + std::to_string(prev.layer) + "/moe/pregate", prev.h);
      ASSERT_EQ(prev.next_pregate_logits.size(), logits.size());
      for (size_t j = 0; j < logits.size(); ++j) {
        EXPECT_NEAR(prev.next_pregate_logits[j], logits[j], 1e-4) << j;
      }
    }
    EXPECT_EQ(r.next_pregate_logits.empty(), !config.MoeLayerHasPregate(r.moe_index));
    ExpectTopK(logits, r.slot_experts, e, k, &exact_tokens);
  }
  EXPECT_GE(exact_tokens, tokens * 9 / 10) << "too many near ties for the check to mean much";

  const ExpertProviderStats& stats = provider.stats();
  EXPECT_EQ(stats.steps, 4);
  EXPECT_EQ(stats.layer_runs, 4 * num_moe);
  EXPECT_EQ(stats.rows, rows_routed);
  EXPECT_EQ(stats.rows, provider.rows_seen);
  EXPECT_EQ(stats.experts_run, provider.experts_seen);
  EXPECT_EQ(stats.bytes_host_to_device, 0);
  EXPECT_EQ(stats.stall_seconds, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Models, ExpertProviderTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "pregated" : "gated");
                         });

TEST(ExpertProviderMisuseTest, IsRefused) {
  std::unique_ptr<Backend> backend = Cpu();
  std::unique_ptr<MoeModel> a = Model(*backend, Config(false));
  std::unique_ptr<MoeModel> b = Model(*backend, Config(false));
  ResidentExpertProvider first, second;
  ASSERT_TRUE(first.Install(*a).ok());
  EXPECT_EQ(first.Install(*b).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.Install(*a).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(KvCacheDecoder::Create(*b, 8, 1, &first).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(KvCacheDecoder::Create(*a, 8, 1, &first).ok());

  Result<Tensor> d = backend->Allocate(DType::kF32, Shape{0, 32});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(a->moe_layer(0).expert_compute().Backward(*backend, *d, *d).code(),
            StatusCode::kFailedPrecondition);

  Result<std::unique_ptr<ExpertProvider>> resident = MakeExpertProvider("resident");
  ASSERT_TRUE(resident.ok());
  EXPECT_EQ((*resident)->name(), "resident");
  Result<std::unique_ptr<ExpertProvider>> variant = MakeExpertProvider("predictive:prefetch");
  EXPECT_TRUE(variant.ok()) << variant.status().ToString();
  Result<std::unique_ptr<ExpertProvider>> bad_variant = MakeExpertProvider("ondemand:prefetch");
  ASSERT_FALSE(bad_variant.ok());
  EXPECT_NE(bad_variant.status().message().find("valid variants: predictive:lru"),
            std::string::npos)
      << bad_variant.status().ToString();
  Result<std::unique_ptr<ExpertProvider>> unknown = MakeExpertProvider("ondemand-typo");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("valid policies: resident"), std::string::npos)
      << unknown.status().ToString();
}

}  // namespace
}  // namespace sy
