// ModelConfig validation (each bad field is named), the layer-kind rule, the pre-gate wiring
// helpers, and DispatchPlan's bookkeeping (grouping, capacity, token-order drops).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/model/dispatch_plan.h"
#include "runtime/model/model_config.h"
#include "runtime/model/moe_model.h"
#include "runtime/model/pregate_init.h"
#include "tests/model/model_test_util.h"

namespace sy {
namespace {

void ExpectRejects(ModelConfig c, const std::string& field) {
  Status s = c.Validate();
  ASSERT_FALSE(s.ok()) << "expected " << field << " to be rejected";
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(field), std::string::npos) << s.ToString();
}

TEST(ModelConfigTest, TinyConfigIsValid) { EXPECT_TRUE(testing::TinyConfig().Validate().ok()); }

TEST(ModelConfigTest, EachBadFieldIsNamed) {
  const ModelConfig ok = testing::TinyConfig();
  auto with = [&](auto&& edit) {
    ModelConfig c = ok;
    edit(c);
    return c;
  };
  ExpectRejects(with([](ModelConfig& c) { c.vocab_size = 0; }), "vocab_size");
  ExpectRejects(with([](ModelConfig& c) { c.hidden_size = -1; }), "hidden_size");
  ExpectRejects(with([](ModelConfig& c) { c.num_layers = 0; }), "num_layers");
  ExpectRejects(with([](ModelConfig& c) { c.num_heads = 0; }), "num_heads");
  ExpectRejects(with([](ModelConfig& c) { c.num_kv_heads = 3; }), "num_kv_heads");
  ExpectRejects(with([](ModelConfig& c) { c.head_dim = 5; }), "head_dim");
  ExpectRejects(with([](ModelConfig& c) {
                  c.head_dim = 0;
                  c.num_heads = 3;
                  c.num_kv_heads = 3;
                }),
                "head_dim");
  ExpectRejects(with([](ModelConfig& c) { c.top_k = 9; }), "top_k");
  ExpectRejects(with([](ModelConfig& c) { c.top_k = 0; }), "top_k");
  ExpectRejects(with([](ModelConfig& c) { c.moe_intermediate_size = 0; }), "moe_intermediate_size");
  ExpectRejects(with([](ModelConfig& c) {
                  c.first_k_dense = 1;
                  c.intermediate_size = 0;
                }),
                "intermediate_size");
  ExpectRejects(with([](ModelConfig& c) { c.first_k_dense = 3; }), "first_k_dense");
  ExpectRejects(with([](ModelConfig& c) { c.moe_every = 0; }), "moe_every");
  ExpectRejects(with([](ModelConfig& c) { c.shared_expert_gate = true; }), "shared_expert_gate");
  ExpectRejects(with([](ModelConfig& c) { c.num_shared_experts = -1; }), "num_shared_experts");
  ExpectRejects(with([](ModelConfig& c) { c.capacity_factor = -0.5; }), "capacity_factor");
  ExpectRejects(with([](ModelConfig& c) { c.router_aux_loss_coef = -1; }), "router_aux_loss_coef");
  ExpectRejects(with([](ModelConfig& c) { c.router_z_loss_coef = -1; }), "router_z_loss_coef");
  ExpectRejects(with([](ModelConfig& c) {
                  c.num_experts = 0;
                  c.pregate = true;
                }),
                "pregate");
  ExpectRejects(with([](ModelConfig& c) { c.rope_theta = 0; }), "rope_theta");
  ExpectRejects(with([](ModelConfig& c) { c.rms_norm_eps = 0; }), "rms_norm_eps");
}

TEST(ModelConfigTest, DerivedDefaults) {
  ModelConfig c = testing::TinyConfig();
  c.num_kv_heads = 0;
  c.head_dim = 0;
  ASSERT_TRUE(c.Validate().ok());
  EXPECT_EQ(c.kv_heads(), 4);
  EXPECT_EQ(c.dim_per_head(), 4);
  c.num_shared_experts = 2;
  EXPECT_EQ(c.shared_intermediate(), 2 * c.moe_intermediate_size);
  c.shared_expert_intermediate_size = 5;
  EXPECT_EQ(c.shared_intermediate(), 10);
}

// DeepSeek (first_k_dense_replace = 1) and Qwen2-MoE (decoder_sparse_step = 2) layouts.
TEST(ModelConfigTest, MoeLayerRule) {
  ModelConfig c = testing::TinyConfig();
  c.num_layers = 7;
  c.first_k_dense = 1;
  c.moe_every = 2;
  std::vector<int> moe;
  for (int l = 0; l < c.num_layers; ++l) moe.push_back(c.MoeIndex(l));
  EXPECT_EQ(moe, (std::vector<int>{-1, 0, -1, 1, -1, 2, -1}));
  EXPECT_EQ(c.NumMoeLayers(), 3);
  c.num_experts = 0;
  c.top_k = 0;
  EXPECT_EQ(c.NumMoeLayers(), 0);
  EXPECT_TRUE(c.Validate().ok()) << "a dense model is valid";
}

// NumMoeLayers counts without walking the layers; it must agree with IsMoeLayer layer by layer,
// including the shapes Validate refuses (a negative first_k_dense, one past the layers).
TEST(ModelConfigTest, NumMoeLayersCountsWhatIsMoeLayerSays) {
  ModelConfig c = testing::TinyConfig();
  for (int experts : {0, 4}) {
    for (int layers : {0, 1, 2, 5, 12, 13}) {
      for (int first : {-3, -1, 0, 1, 2, 5, 12, 14}) {
        for (int every : {0, 1, 2, 3, 7}) {
          c.num_experts = experts;
          c.num_layers = layers;
          c.first_k_dense = first;
          c.moe_every = every;
          int walked = 0;
          for (int l = 0; l < layers; ++l) walked += c.IsMoeLayer(l) ? 1 : 0;
          EXPECT_EQ(c.NumMoeLayers(), walked)
              << "experts " << experts << ", layers " << layers << ", first_k_dense " << first
              << ", moe_every " << every;
        }
      }
    }
  }
}

// Pre-gated MoE: block 0 has its gate and a pre-gate, middle blocks only a pre-gate, the last
// block neither.
TEST(ModelConfigTest, PregateWiring) {
  ModelConfig c = testing::TinyConfig();
  c.num_layers = 4;
  c.pregate = true;
  EXPECT_TRUE(c.MoeLayerHasGate(0));
  EXPECT_TRUE(c.MoeLayerHasPregate(0));
  EXPECT_FALSE(c.MoeLayerHasGate(1));
  EXPECT_TRUE(c.MoeLayerHasPregate(1));
  EXPECT_FALSE(c.MoeLayerHasGate(3));
  EXPECT_FALSE(c.MoeLayerHasPregate(3));
  c.pregate = false;
  for (int m = 0; m < 4; ++m) {
    EXPECT_TRUE(c.MoeLayerHasGate(m));
    EXPECT_FALSE(c.MoeLayerHasPregate(m));
  }
}

TEST(ModelConfigTest, PregateSourceNames) {
  ModelConfig c = testing::TinyConfig();
  c.num_layers = 5;
  c.first_k_dense = 1;
  c.moe_every = 2;  // MoE layers 1 and 3
  c.pregate = true;
  EXPECT_EQ(PregateSourceName(c, "layers/1/moe/pregate"), "layers/3/moe/gate");
  EXPECT_EQ(PregateSourceName(c, "layers/1/moe/gate"), "layers/1/moe/gate");
  EXPECT_EQ(PregateSourceName(c, "layers/3/moe/pregate_x"), "layers/3/moe/pregate_x");
  EXPECT_EQ(PregateSourceName(c, "embed_tokens"), "embed_tokens");
}

// NumParameters is arithmetic on the config; the model's ParameterStore counts what was really
// registered. They must agree for every family's features.
TEST(ModelConfigTest, NumParametersCountsWhatTheModelRegisters) {
  std::unique_ptr<Backend> backend = CreateBackend(Device::Cpu()).value();
  std::vector<ModelConfig> configs;
  ModelConfig base = testing::TinyConfig();
  configs.push_back(base);
  ModelConfig c = base;
  c.attention_bias = true;
  c.num_shared_experts = 2;
  c.shared_expert_gate = true;
  c.first_k_dense = 1;
  c.intermediate_size = 24;
  configs.push_back(c);
  c = base;
  c.qk_norm = true;
  c.head_dim = 8;
  c.tie_word_embeddings = true;
  configs.push_back(c);
  c = base;
  c.qk_norm = true;
  c.qk_norm_per_head = false;
  c.num_layers = 4;
  c.pregate = true;
  configs.push_back(c);
  for (const ModelConfig& config : configs) {
    SCOPED_TRACE(config.ToString());
    ModelOptions options;
    options.with_grad = false;
    Result<std::unique_ptr<MoeModel>> model = MoeModel::Create(*backend, config, options);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    int64_t registered = 0, experts = 0;
    for (const Parameter& p : (*model)->parameters()) {
      registered += p.value.numel();
      if (p.is_expert) experts += p.value.numel();
    }
    EXPECT_EQ(config.NumParameters(), registered);
    EXPECT_EQ(config.NumExpertParameters(), experts);
  }
}

TEST(ModelConfigTest, SummarySpeaksToPeople) {
  ModelConfig c = testing::TinyConfig();
  c.num_layers = 2;
  c.first_k_dense = 0;
  c.num_experts = 4;
  c.top_k = 2;
  c.hidden_size = 64;
  c.vocab_size = 32000;
  const std::string summary = c.Summary();
  EXPECT_EQ(summary.rfind("2 layers, 4 experts (top-2), hidden 64, ", 0), 0u) << summary;
  EXPECT_NE(summary.find(" M parameters"), std::string::npos) << summary;
}

TEST(DispatchPlanTest, Capacity) {
  EXPECT_EQ(ExpertCapacity(0.0, 100, 2, 8), -1);
  EXPECT_EQ(ExpertCapacity(1.0, 8, 1, 4), 2);
  EXPECT_EQ(ExpertCapacity(1.25, 8, 1, 1), 10);  // exactly 10, not rounded up to 11
  EXPECT_EQ(ExpertCapacity(1.0, 10, 2, 8), 3);   // 2.5 -> 3
  EXPECT_EQ(ExpertCapacity(0.01, 10, 1, 8), 1);  // never 0
}

TEST(DispatchPlanTest, GroupsByExpertInTokenOrder) {
  // 4 tokens, top-2, 3 experts. Slots: t0 -> (2, 0), t1 -> (0, 1), t2 -> (2, 1), t3 -> (0, 2).
  const std::vector<int32_t> slots = {2, 0, 0, 1, 2, 1, 0, 2};
  DispatchPlan p = BuildDispatchPlan(slots, 4, 2, 3, 0.0);
  EXPECT_EQ(p.routed, (std::vector<int64_t>{3, 2, 3}));
  EXPECT_EQ(p.group_rows, p.routed);
  EXPECT_EQ(p.row_token, (std::vector<int32_t>{0, 1, 3, 1, 2, 0, 2, 3}));
  EXPECT_EQ(p.row_slot, (std::vector<int32_t>{1, 2, 6, 3, 5, 0, 4, 7}));
  EXPECT_EQ(p.num_dropped(), 0);
}

TEST(DispatchPlanTest, DropsLaterTokensPastCapacity) {
  // capacity ceil(0.75 * 4 * 2 / 3) = 2: expert 0 keeps tokens 0, 1 and drops token 3; expert 2
  // keeps tokens 0, 2 and drops token 3.
  const std::vector<int32_t> slots = {2, 0, 0, 1, 2, 1, 0, 2};
  DispatchPlan p = BuildDispatchPlan(slots, 4, 2, 3, 0.75);
  EXPECT_EQ(p.capacity, 2);
  EXPECT_EQ(p.routed, (std::vector<int64_t>{3, 2, 3}));
  EXPECT_EQ(p.group_rows, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(p.row_token, (std::vector<int32_t>{0, 1, 1, 2, 0, 2}));
  EXPECT_EQ(p.row_slot, (std::vector<int32_t>{1, 2, 3, 5, 0, 4}));
  EXPECT_EQ(p.num_dropped(), 2);
}

TEST(DispatchPlanTest, IdleExpertsHaveEmptyGroups) {
  DispatchPlan p = BuildDispatchPlan(std::vector<int32_t>{3, 3, 3}, 3, 1, 5, 0.0);
  EXPECT_EQ(p.group_rows, (std::vector<int64_t>{0, 0, 0, 3, 0}));
  EXPECT_EQ(p.row_token, (std::vector<int32_t>{0, 1, 2}));
}

}  // namespace
}  // namespace sy
