// Finite-difference gradient checks of the whole model: the loss of MoeModel::Forward against
// MoeModel::Backward, for every parameter, in configurations that switch on every feature
// (GQA, q/k norm, attention bias, dense + MoE layers, shared experts with their gate, capacity
// dropping, aux and z losses, tied embeddings, pre-gating, recomputation). The method and its
// tolerances are explained in tests/model/model_test_util.h.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/model/moe_model.h"
#include "tests/model/model_test_util.h"

namespace sy {
namespace {

using testing::CheckDirectionalGradient;
using testing::FdResult;
using testing::HostI32;
using testing::ToHost;

struct ModelCase {
  const char* name;
  ModelConfig config;
};

ModelConfig Full() {
  ModelConfig c = testing::TinyConfig();
  c.num_layers = 3;
  c.num_kv_heads = 2;
  c.qk_norm = true;
  c.attention_bias = true;
  c.first_k_dense = 1;
  c.num_experts = 6;
  c.top_k = 2;
  c.norm_topk_prob = false;
  c.num_shared_experts = 1;
  c.shared_expert_intermediate_size = 8;
  c.shared_expert_gate = true;
  c.router_aux_loss_coef = 0.1;
  c.router_z_loss_coef = 0.05;
  c.rope_theta = 100.0;
  return c;
}

std::vector<ModelCase> Cases() {
  std::vector<ModelCase> cases;
  cases.push_back({"full", Full()});
  ModelConfig pregated = Full();
  pregated.num_layers = 4;
  pregated.pregate = true;
  pregated.norm_topk_prob = true;
  pregated.tie_word_embeddings = true;
  cases.push_back({"pregated_tied", pregated});
  ModelConfig capacity = Full();
  capacity.capacity_factor = 1.0;
  capacity.top_k = 1;
  capacity.qk_norm_per_head = false;
  capacity.moe_every = 2;
  capacity.num_layers = 4;
  capacity.recompute = true;
  cases.push_back({"capacity_top1_recompute", capacity});
  return cases;
}

class ModelGradTest : public ::testing::TestWithParam<ModelCase> {};

TEST_P(ModelGradTest, EveryParameter) {
  const ModelConfig& config = GetParam().config;
  auto backend = testing::MakeBackend(Device::Cpu());
  auto created = MoeModel::Create(*backend, config);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  MoeModel& model = **created;
  ASSERT_TRUE(model.InitializeParameters(/*seed=*/31, /*stddev=*/0.3f).ok());
  // Norm weights and biases away from 1 and 0.
  uint64_t seed = 40;
  for (Parameter& p : model.parameters()) {
    if (p.init == ParamInit::kNormal) continue;
    std::vector<float> v = ToHost(*backend, p.value);
    std::vector<float> n = testing::RandomNormal(v.size(), seed++, 0.2f);
    for (size_t i = 0; i < v.size(); ++i) v[i] += n[i];
    testing::FromHost(*backend, v, p.value);
  }

  const int64_t b = 2, t = 5;
  std::vector<int32_t> tokens = testing::RandomTokens(b * t, config.vocab_size, 32);
  std::vector<int32_t> targets = testing::RandomTokens(b * t, config.vocab_size, 33);
  targets[3] = -1;  // an ignored position
  Tensor tok = HostI32(tokens, Shape{b, t});
  Tensor tgt = HostI32(targets, Shape{b, t});

  model.ZeroGrads();
  auto report = model.Forward(tok, tgt);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->num_targets, b * t - 1);
  ASSERT_TRUE(model.Backward().ok());
  std::vector<std::vector<float>> grads;
  for (const Parameter& p : model.parameters()) grads.push_back(ToHost(*backend, p.grad));

  const int num_moe = config.NumMoeLayers();
  testing::LossFn loss = [&]() {
    auto r = model.Forward(tok, tgt);
    SY_CHECK(r.ok()) << r.status().ToString();
    return static_cast<double>(r->loss);
  };
  testing::RoutingFn routing = [&]() {
    std::vector<int32_t> f;
    for (int m = 0; m < num_moe; ++m) {
      const DispatchPlan& p = model.moe_layer(m).plan();
      f.insert(f.end(), p.row_slot.begin(), p.row_slot.end());
      for (int64_t c : p.routed) f.push_back(static_cast<int32_t>(c));
    }
    return f;
  };
  int checked = 0, skipped = 0;
  size_t i = 0;
  for (const Parameter& p : model.parameters()) {
    FdResult res = CheckDirectionalGradient(*backend, p.value, grads[i++], loss, routing);
    EXPECT_EQ(res.failed, 0) << p.name << "\n" << res.report;
    if (std::getenv("SY_FD_VERBOSE") != nullptr) {
      std::printf("%s\n%s", p.name.c_str(), res.report.c_str());
    }
    checked += res.checked;
    skipped += res.skipped;
  }
  EXPECT_GT(checked, 4 * skipped) << "too many directions changed the routing";
  if (config.capacity_factor > 0.0) {
    int64_t dropped = 0;
    for (int m = 0; m < num_moe; ++m) dropped += model.moe_layer(m).plan().num_dropped();
    EXPECT_GT(dropped, 0) << "the capacity configuration should drop token-slots";
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, ModelGradTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace sy
