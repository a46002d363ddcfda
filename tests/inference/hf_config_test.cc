// Tests of config.json -> ModelConfig (inference/hf_config.h) and of the tensor-name mapping
// (inference/model_loader.h). The forward of loaded checkpoints is checked against PyTorch by
// hf_moe_oracle.py.
#include "inference/hf_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "inference/model_loader.h"
#include "runtime/backend/backend.h"

namespace sy {
namespace {

constexpr char kMixtral[] = R"({
  "model_type": "mixtral", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
  "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
  "num_local_experts": 8, "num_experts_per_tok": 2, "rope_theta": 1000000.0,
  "rms_norm_eps": 1e-05, "sliding_window": null, "max_position_embeddings": 32768,
  "hidden_act": "silu", "tie_word_embeddings": false, "router_aux_loss_coef": 0.02})";

Result<HfModelConfig> Parse(const std::string& text) { return ParseHfConfig(text, "config.json"); }

std::string WithField(const std::string& base, const std::string& field) {
  return base.substr(0, base.size() - 1) + ", " + field + "}";
}

void ExpectErrorIn(const std::string& text, const std::string& needle) {
  Result<HfModelConfig> r = Parse(text);
  ASSERT_FALSE(r.ok()) << needle;
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
}

TEST(HfConfigTest, Mixtral) {
  Result<HfModelConfig> r = Parse(kMixtral);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ModelConfig& c = r->config;
  EXPECT_EQ(r->family, HfFamily::kMixtral);
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.moe_intermediate_size, 14336);
  EXPECT_EQ(c.kv_heads(), 8);
  EXPECT_EQ(c.dim_per_head(), 128);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.NumMoeLayers(), 32);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
}

TEST(HfConfigTest, Qwen2MoeSharedExpertAndSparseStep) {
  Result<HfModelConfig> r = Parse(R"({"model_type": "qwen2_moe", "vocab_size": 151936,
    "hidden_size": 2048, "intermediate_size": 5632, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "num_hidden_layers": 24,
    "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 60,
    "num_experts_per_tok": 4, "norm_topk_prob": false, "decoder_sparse_step": 2,
    "mlp_only_layers": [], "use_sliding_window": false, "sliding_window": 32768,
    "max_position_embeddings": 8192, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ModelConfig& c = r->config;
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.num_shared_experts, 1);
  EXPECT_EQ(c.shared_intermediate(), 5632);
  EXPECT_TRUE(c.shared_expert_gate);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_FALSE(c.IsMoeLayer(0));
  EXPECT_TRUE(c.IsMoeLayer(1));
  EXPECT_FALSE(c.IsMoeLayer(2));
  EXPECT_TRUE(c.IsMoeLayer(23));
}

TEST(HfConfigTest, Qwen3MoeOlmoeDeepseek) {
  Result<HfModelConfig> q3 = Parse(R"({"model_type": "qwen3_moe", "vocab_size": 151936,
    "hidden_size": 2048, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
    "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": true,
    "rope_scaling": null, "use_sliding_window": false, "sliding_window": null})");
  ASSERT_TRUE(q3.ok()) << q3.status().ToString();
  EXPECT_TRUE(q3->config.qk_norm);
  EXPECT_TRUE(q3->config.qk_norm_per_head);
  EXPECT_EQ(q3->config.dim_per_head(), 128);

  Result<HfModelConfig> olmoe = Parse(R"({"model_type": "olmoe", "vocab_size": 50304,
    "hidden_size": 2048, "intermediate_size": 1024, "num_hidden_layers": 16,
    "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 64,
    "num_experts_per_tok": 8, "norm_topk_prob": false, "clip_qkv": null})");
  ASSERT_TRUE(olmoe.ok()) << olmoe.status().ToString();
  EXPECT_TRUE(olmoe->config.qk_norm);
  EXPECT_FALSE(olmoe->config.qk_norm_per_head);
  EXPECT_EQ(olmoe->config.moe_intermediate_size, 1024);

  Result<HfModelConfig> ds = Parse(R"({"model_type": "deepseek", "vocab_size": 102400,
    "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
    "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16,
    "n_shared_experts": 2, "n_routed_experts": 64, "num_experts_per_tok": 6,
    "moe_layer_freq": 1, "first_k_dense_replace": 1, "norm_topk_prob": false,
    "scoring_func": "softmax", "rope_scaling": null})");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_FALSE(ds->config.IsMoeLayer(0));
  EXPECT_TRUE(ds->config.IsMoeLayer(1));
  EXPECT_EQ(ds->config.shared_intermediate(), 2 * 1408);
  EXPECT_FALSE(ds->config.norm_topk_prob);
}

// Issue 17: transformers puts attention_bias on q, k, v and o for Qwen3-MoE, OLMoE and DeepSeek;
// Qwen2-MoE's bias is q, k, v only, and "qkv_bias": false turns it off.
TEST(HfConfigTest, AttentionBiasPerFamily) {
  const std::string small = R"("vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
    "moe_intermediate_size": 4, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_experts_per_tok": 2, "shared_expert_intermediate_size": 4)";
  for (const char* type : {"qwen3_moe", "olmoe", "deepseek"}) {
    const std::string experts =
        std::string(type) == "deepseek" ? R"("n_routed_experts": 4)" : R"("num_experts": 4)";
    const std::string base =
        std::string(R"({"model_type": ")") + type + R"(", )" + small + ", " + experts + "}";
    Result<HfModelConfig> off = Parse(base);
    ASSERT_TRUE(off.ok()) << off.status().ToString();
    EXPECT_FALSE(off->config.attention_bias) << type;
    EXPECT_FALSE(off->config.attention_out_bias) << type;
    Result<HfModelConfig> on = Parse(WithField(base, R"("attention_bias": true)"));
    ASSERT_TRUE(on.ok()) << type << ": " << on.status().ToString();
    EXPECT_TRUE(on->config.attention_bias) << type;
    EXPECT_TRUE(on->config.attention_out_bias) << type;
    EXPECT_FALSE(on->attention_bias_from_checkpoint) << type;
  }
  const std::string qwen2 =
      std::string(R"({"model_type": "qwen2_moe", )") + small + R"(, "num_experts": 4})";
  Result<HfModelConfig> implied = Parse(qwen2);
  ASSERT_TRUE(implied.ok()) << implied.status().ToString();
  EXPECT_TRUE(implied->config.attention_bias);
  EXPECT_FALSE(implied->config.attention_out_bias);
  EXPECT_TRUE(implied->attention_bias_from_checkpoint);
  Result<HfModelConfig> off = Parse(WithField(qwen2, R"("qkv_bias": false)"));
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->config.attention_bias);
  EXPECT_FALSE(off->attention_bias_from_checkpoint);
  ExpectErrorIn(WithField(qwen2, R"("qkv_bias": 1)"), "qkv_bias");
}

void ExpectError(const std::string& text, const std::string& needle) {
  Result<HfModelConfig> r = Parse(text);
  ASSERT_FALSE(r.ok()) << needle;
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("config.json"), std::string::npos);
}

TEST(HfConfigTest, Errors) {
  ExpectError(R"({"model_type": "llama"})", "\"llama\" is not supported");
  ExpectError(R"({"vocab_size": 3})", "model_type");
  ExpectError("{", "not valid JSON");
  ExpectError(WithField(kMixtral, R"("rope_scaling": {"type": "yarn", "factor": 4})"),
              "rope_scaling");
  ExpectError(WithField(kMixtral, R"("hidden_act": "gelu")"), "hidden_act");
  std::string windowed = kMixtral;
  windowed.replace(windowed.find("\"sliding_window\": null"), 22, "\"sliding_window\": 4096");
  ExpectError(windowed, "sliding_window");
  std::string no_experts = kMixtral;
  no_experts.replace(no_experts.find("\"num_local_experts\": 8"), 22,
                     "\"num_local_experts\": \"8\"");
  ExpectError(no_experts, "num_local_experts");
  ExpectError(R"({"model_type": "deepseek", "vocab_size": 10, "hidden_size": 8,
    "intermediate_size": 8, "moe_intermediate_size": 4, "num_hidden_layers": 4,
    "num_attention_heads": 2, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_layer_freq": 2, "first_k_dense_replace": 1})",
              "moe_layer_freq");
  ExpectError(R"({"model_type": "olmoe", "vocab_size": 10, "hidden_size": 8,
    "intermediate_size": 4, "num_hidden_layers": 1, "num_attention_heads": 2,
    "num_experts": 4, "num_experts_per_tok": 2, "clip_qkv": 8.0})",
              "clip_qkv");
  ExpectError(R"({"model_type": "qwen3_moe", "vocab_size": 10, "hidden_size": 8,
    "moe_intermediate_size": 4, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_experts": 4, "num_experts_per_tok": 2, "mlp_only_layers": [1]})",
              "mlp_only_layers");
}

TEST(HfTensorNameTest, Families) {
  EXPECT_EQ(HfTensorName(HfFamily::kMixtral, "experts/layer3/expert7/w_gate"),
            "model.layers.3.block_sparse_moe.experts.7.w1.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kMixtral, "experts/layer3/expert7/w_up"),
            "model.layers.3.block_sparse_moe.experts.7.w3.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kMixtral, "experts/layer3/expert7/w_down"),
            "model.layers.3.block_sparse_moe.experts.7.w2.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kMixtral, "layers/0/moe/gate"),
            "model.layers.0.block_sparse_moe.gate.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kQwen2Moe, "layers/1/moe/shared_experts/w_down"),
            "model.layers.1.mlp.shared_expert.down_proj.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kQwen2Moe, "layers/1/moe/shared_expert_gate"),
            "model.layers.1.mlp.shared_expert_gate.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kQwen2Moe, "layers/1/attn/bk"),
            "model.layers.1.self_attn.k_proj.bias");
  EXPECT_EQ(HfTensorName(HfFamily::kOlmoe, "layers/1/attn/bo"),
            "model.layers.1.self_attn.o_proj.bias");
  EXPECT_EQ(HfTensorName(HfFamily::kDeepseek, "layers/2/moe/shared_experts/w_gate"),
            "model.layers.2.mlp.shared_experts.gate_proj.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kDeepseek, "layers/0/mlp/w_up"),
            "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kOlmoe, "experts/layer0/expert12/w_down"),
            "model.layers.0.mlp.experts.12.down_proj.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kQwen3Moe, "layers/5/attn/q_norm"),
            "model.layers.5.self_attn.q_norm.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kQwen3Moe, "layers/5/post_attention_norm"),
            "model.layers.5.post_attention_layernorm.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kQwen3Moe, "final_norm"), "model.norm.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kQwen3Moe, "layers/0/moe/pregate"), "");
}

TEST(LoadHfModelTest, MissingDirectory) {
  Result<HfModelConfig> r = LoadHfConfig("/nonexistent/model");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  // The fix names every kind of model --model takes, a training checkpoint included.
  EXPECT_NE(r.status().message().find("/nonexistent/model/config.json"), std::string::npos);
  EXPECT_NE(r.status().message().find(".gguf"), std::string::npos);
  EXPECT_NE(r.status().message().find("checkpoint"), std::string::npos);
}

// Issue 20, defect 8: a config.json that claims 10^9 layers over a checkpoint of one layer fails on
// the missing tensors before any of the model is allocated (it used to allocate gigabytes first).
TEST(LoadHfModelTest, ConfigClaimingMoreLayersThanTheFilesHoldFailsAtOnce) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("sy_hf_layers_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "mixtral", "vocab_size": 16,
    "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1000000000,
    "num_attention_heads": 2, "num_key_value_heads": 2, "num_local_experts": 2,
    "num_experts_per_tok": 1, "max_position_embeddings": 64})";
  // One tensor: layer 0's input norm, 8 f32 ones.
  const std::string header =
      R"({"model.layers.0.input_layernorm.weight":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})";
  {
    std::ofstream out(dir / "model.safetensors", std::ios::binary);
    const uint64_t size = header.size();
    out.write(reinterpret_cast<const char*>(&size), 8);
    out << header;
    const std::vector<float> ones(8, 1.0f);
    out.write(reinterpret_cast<const char*>(ones.data()), 32);
  }
  auto backend = CreateBackend(Device::Cpu());
  ASSERT_TRUE(backend.ok());
  const auto start = std::chrono::steady_clock::now();
  Result<LoadedModel> loaded = LoadHfModel(**backend, dir.string());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kNotFound);
  const std::string& message = loaded.status().message();
  EXPECT_NE(message.find("num_hidden_layers 1000000000"), std::string::npos) << message;
  EXPECT_NE(message.find("model.layers.1.input_layernorm.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("holds 1 layer"), std::string::npos) << message;
  EXPECT_LT(seconds, 60.0);  // the config's own checks walk the 10^9 layers once

  // A config of one layer but a hidden size far past the weights' fails before allocating too.
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "mixtral", "vocab_size": 16,
    "hidden_size": 1048576, "intermediate_size": 16, "num_hidden_layers": 1,
    "num_attention_heads": 2, "num_key_value_heads": 2, "num_local_experts": 2,
    "num_experts_per_tok": 1, "max_position_embeddings": 64})";
  {
    std::ofstream out(dir / "model.safetensors", std::ios::binary);
    const uint64_t size = header.size();
    out.write(reinterpret_cast<const char*>(&size), 8);
    out << header;
    const std::vector<float> ones(8, 1.0f);
    out.write(reinterpret_cast<const char*>(ones.data()), 32);
  }
  Result<LoadedModel> wide = LoadHfModel(**backend, dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(wide.ok());
  EXPECT_EQ(wide.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wide.status().message().find("more than twice the 8 values the checkpoint holds"),
            std::string::npos)
      << wide.status().message();
}

}  // namespace
}  // namespace sy
