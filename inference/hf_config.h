// Hugging Face config.json -> ModelConfig for the MoE families Switchyard runs:
//
//   model_type  family            notes
//   mixtral     Mixtral           experts of width intermediate_size; top-k renormalised
//   qwen2_moe   Qwen2-MoE         q/k/v bias (qkv_bias, default true); one shared expert with a
//                                 sigmoid gate
//   qwen3_moe   Qwen3-MoE         per-head q/k RMSNorm; explicit head_dim
//   olmoe       OLMoE             q/k RMSNorm over the whole projection
//   deepseek    DeepSeek-MoE v1   first_k_dense_replace dense layers, n_shared_experts fused
//   glm4_moe    GLM-4.5           partial rotary (partial_rotary_factor), optional per-head q/k
//                                 RMSNorm (use_qk_norm), q/k/v bias (attention_bias, o never has
//                                 one), sigmoid routing with e_score_correction_bias and
//                                 group-limited top-k (n_group, topk_group), routed_scaling_factor,
//                                 shared experts and first_k_dense_replace as DeepSeek. Its
//                                 multi-token-prediction layers (num_nextn_predict_layers, stored
//                                 after the decoder's) are not part of the forward; they are
//                                 skipped, as transformers skips them.
// Qwen3-MoE, OLMoE and DeepSeek with attention_bias = true have a bias on q, k, v and o, as
// transformers builds them.
//
// Fields that change the math and that Switchyard does not implement are errors naming the field
// and its value (rope_scaling, a sliding window shorter than the context, clip_qkv, an activation
// other than silu, ...), never silently ignored. An unknown model_type is an error listing the
// supported ones.
//
// Ownership: value types. Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "runtime/core/status.h"
#include "runtime/model/model_config.h"

namespace sy {

enum class HfFamily : uint8_t { kMixtral, kQwen2Moe, kQwen3Moe, kOlmoe, kDeepseek, kGlm4Moe };

std::string_view HfFamilyModelType(HfFamily family);    // "mixtral", "qwen2_moe", ...
std::string_view HfFamilyDisplayName(HfFamily family);  // "Mixtral", "Qwen2-MoE", ...

struct HfModelConfig {
  HfFamily family = HfFamily::kMixtral;
  ModelConfig config;                   // validated
  int64_t max_position_embeddings = 0;  // 0 when absent
  // Qwen2-MoE without a "qkv_bias" key: config.attention_bias is true, and the loader turns it
  // off when the checkpoint holds no q_proj bias (LoadHfModel). False for every other config.
  bool attention_bias_from_checkpoint = false;
  // Decoder layers stored after config.num_layers that the forward does not use (GLM-4.5's
  // num_nextn_predict_layers); the loader skips their tensors. Default: 0.
  int unused_trailing_layers = 0;
};

// Whether `hf_name` belongs to a decoder layer stored after the ones the forward uses
// (HfModelConfig::unused_trailing_layers: GLM-4.5's multi-token-prediction layers).
bool InUnusedTrailingLayer(const HfModelConfig& hf, std::string_view hf_name);

// Parses config.json text. `file` names it in error messages.
Result<HfModelConfig> ParseHfConfig(std::string_view json_text, std::string_view file);
// Reads and parses `dir`/config.json.
Result<HfModelConfig> LoadHfConfig(const std::string& dir);

}  // namespace sy
