#include "inference/gguf_model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <utility>

namespace sy {
namespace {

using storage::GgufHeader;
using storage::GgufKeyValue;
using storage::GgufTensorInfo;
using storage::GgufValue;
using storage::GgufValueType;

constexpr HfFamily kFamilies[] = {HfFamily::kMixtral, HfFamily::kQwen2Moe, HfFamily::kQwen3Moe,
                                  HfFamily::kOlmoe,   HfFamily::kDeepseek, HfFamily::kGlm4Moe};

// ---- metadata ----

std::string ArchKey(HfFamily family, std::string_view key) {
  return std::string(GgufArchitecture(family)) + "." + std::string(key);
}

// The shortest decimal that reads back as the f32 `f`, as a double ("1e-06" for the f32 nearest
// 1e-6): GGUF stores eps and theta as f32, config.json as the decimal a person wrote.
double ShortestDecimal(double f) {
  const auto f32 = static_cast<float>(f);
  char buf[64];
  for (int precision = 1; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, static_cast<double>(f32));
    if (std::strtof(buf, nullptr) == f32) return std::strtod(buf, nullptr);
  }
  return static_cast<double>(f32);
}

bool DefaultNormTopk(HfFamily family) {
  return family == HfFamily::kMixtral || family == HfFamily::kQwen3Moe ||
         family == HfFamily::kGlm4Moe;
}

// llama.cpp's llama_expert_gating_func_type.
constexpr int64_t kGatingSoftmax = 1;
constexpr int64_t kGatingSigmoid = 2;

// Metadata access with errors naming the file and the key.
class Meta {
 public:
  Meta(const GgufHeader& h, std::string file, std::string arch)
      : h_(h), file_(std::move(file)), arch_(std::move(arch)) {}
  std::string Key(std::string_view k) const { return arch_ + "." + std::string(k); }
  const GgufValue* Find(std::string_view k) const { return h_.Find(Key(k)); }
  Status Error(std::string_view k, const std::string& why) const {
    return InvalidArgumentError(file_ + ": metadata key " + Key(k) + " " + why);
  }
  Result<int64_t> Int(std::string_view k, std::optional<int64_t> fallback, int64_t min = 0) const {
    const GgufValue* v = Find(k);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return Error(k, "is missing; a GGUF of this architecture must set it");
    }
    uint64_t u = 0;
    if (!v->AsUint(&u) || u > 0x7fffffff || static_cast<int64_t>(u) < min) {
      return Error(k, "is " + v->Describe() + ", expected an integer >= " + std::to_string(min));
    }
    return static_cast<int64_t>(u);
  }
  Result<double> Double(std::string_view k, double fallback) const {
    const GgufValue* v = Find(k);
    if (v == nullptr) return fallback;
    double d = 0;
    if (!v->AsDouble(&d) || !std::isfinite(d)) {
      return Error(k, "is " + v->Describe() + ", expected a finite number");
    }
    return v->type == GgufValueType::kF32 ? ShortestDecimal(d) : d;
  }
  Result<bool> Bool(std::string_view k, bool fallback) const {
    const GgufValue* v = Find(k);
    if (v == nullptr) return fallback;
    if (v->type != GgufValueType::kBool) return Error(k, "is " + v->Describe() + ", expected bool");
    return v->b;
  }
  Status Unsupported(std::string_view k, const std::string& why) const {
    return UnimplementedError(file_ + ": metadata key " + Key(k) + " = " + Find(k)->Describe() +
                              " is not supported: " + why);
  }

 private:
  const GgufHeader& h_;
  std::string file_;
  std::string arch_;
};

}  // namespace

bool GgufSupportsFamily(HfFamily family) {
  return std::find(std::begin(kFamilies), std::end(kFamilies), family) != std::end(kFamilies);
}

std::string_view GgufArchitecture(HfFamily family) {
  switch (family) {
    case HfFamily::kMixtral:
      return "llama";
    case HfFamily::kQwen2Moe:
      return "qwen2moe";
    case HfFamily::kQwen3Moe:
      return "qwen3moe";
    case HfFamily::kOlmoe:
      return "olmoe";
    case HfFamily::kDeepseek:
      return "deepseek";
    case HfFamily::kGlm4Moe:
      return "glm4moe";
  }
  return "?";
}

bool GgufPermutesQK(HfFamily family) {
  return family == HfFamily::kMixtral || family == HfFamily::kDeepseek;
}

std::vector<GgufKeyValue> GgufModelMetadata(const HfModelConfig& hf, const std::string& name) {
  const ModelConfig& c = hf.config;
  const HfFamily f = hf.family;
  std::vector<GgufKeyValue> kv;
  auto u32 = [&](std::string_view key, int64_t v) {
    kv.push_back({ArchKey(f, key), GgufValue::U32(static_cast<uint32_t>(v))});
  };
  auto f32 = [&](std::string_view key, double v) {
    kv.push_back({ArchKey(f, key), GgufValue::F32(static_cast<float>(v))});
  };
  kv.push_back({"general.architecture", GgufValue::String(std::string(GgufArchitecture(f)))});
  kv.push_back({"general.name", GgufValue::String(name)});
  u32("vocab_size", c.vocab_size);
  if (hf.max_position_embeddings > 0) u32("context_length", hf.max_position_embeddings);
  u32("embedding_length", c.hidden_size);
  u32("block_count", c.num_layers);
  u32("feed_forward_length", f == HfFamily::kMixtral || c.intermediate_size == 0
                                 ? c.moe_intermediate_size
                                 : c.intermediate_size);
  u32("attention.head_count", c.num_heads);
  u32("attention.head_count_kv", c.kv_heads());
  u32("attention.key_length", c.dim_per_head());
  u32("attention.value_length", c.dim_per_head());
  u32("rope.dimension_count", c.rotary_dim > 0 ? c.rotary_dim : c.dim_per_head());
  f32("rope.freq_base", c.rope_theta);
  f32("attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  u32("expert_count", c.num_experts);
  u32("expert_used_count", c.top_k);
  if (f != HfFamily::kMixtral) u32("expert_feed_forward_length", c.moe_intermediate_size);
  if (c.num_shared_experts > 0) {
    if (f == HfFamily::kQwen2Moe) {
      u32("expert_shared_feed_forward_length", c.shared_intermediate());
    } else {
      u32("expert_shared_count", c.num_shared_experts);
    }
  }
  if (f == HfFamily::kDeepseek || f == HfFamily::kGlm4Moe) {
    u32("leading_dense_block_count", c.first_k_dense);
    f32("expert_weights_scale", c.routed_scaling_factor);
  }
  if (c.router_scoring == RouterScoring::kSigmoid) {
    u32("expert_gating_func", kGatingSigmoid);
    if (c.topk_groups < c.num_expert_groups) {  // llama.cpp asserts used < count
      u32("expert_group_count", c.num_expert_groups);
      u32("expert_group_used_count", c.topk_groups);
    }
  }
  kv.push_back({ArchKey(f, "expert_weights_norm"), GgufValue::Bool(c.norm_topk_prob)});
  kv.push_back({"general.quantization_version", GgufValue::U32(2)});
  return kv;
}

Result<HfModelConfig> ParseGgufModelConfig(const GgufHeader& h, const std::string& file) {
  const GgufValue* arch_value = h.Find("general.architecture");
  if (arch_value == nullptr || arch_value->type != GgufValueType::kString) {
    return InvalidArgumentError(file +
                                ": no string general.architecture; is this a llama.cpp "
                                "model file?");
  }
  const std::string& arch = arch_value->s;
  std::optional<HfFamily> family;
  for (HfFamily f : kFamilies) {
    if (GgufArchitecture(f) == arch) family = f;
  }
  if (!family) {
    return UnimplementedError(file + ": architecture \"" + arch +
                              "\" is not supported; supported: llama (Mixtral), qwen2moe, "
                              "qwen3moe, olmoe, deepseek, glm4moe");
  }
  HfModelConfig out;
  out.family = *family;
  ModelConfig& c = out.config;
  const Meta m(h, file, arch);
#define SY_GET(var, expr) SY_ASSIGN_OR_RETURN(var, expr)
  for (const char* k : {"rope.scaling.type", "attention.sliding_window", "expert_gating_func"}) {
    const GgufValue* v = m.Find(k);
    if (v == nullptr) continue;
    if (std::string(k) == "rope.scaling.type" && v->type == GgufValueType::kString &&
        v->s == "none") {
      continue;
    }
    uint64_t gating = 0;
    const bool glm = *family == HfFamily::kGlm4Moe;
    if (std::string(k) == "expert_gating_func" && v->AsUint(&gating) &&
        static_cast<int64_t>(gating) == (glm ? kGatingSigmoid : kGatingSoftmax)) {
      continue;
    }
    return m.Unsupported(k, std::string(k) == "expert_gating_func"
                                ? (glm ? "glm4moe routes by sigmoid (2)"
                                       : "only softmax routing (1) is implemented for this "
                                         "architecture")
                                : "only plain RoPE over the full context is implemented");
  }
  SY_GET(c.routed_scaling_factor, m.Double("expert_weights_scale", 1.0));
  if (c.routed_scaling_factor != 1.0 && *family != HfFamily::kGlm4Moe) {
    return m.Unsupported("expert_weights_scale", "routed weights are not rescaled");
  }
  const GgufTensorInfo* embd = h.FindTensor("token_embd.weight");
  if (embd == nullptr || embd->ne.size() != 2) {
    return InvalidArgumentError(file + ": tensor \"token_embd.weight\" is missing or not 2-D");
  }
  SY_GET(c.hidden_size, m.Int("embedding_length", std::nullopt, 1));
  SY_GET(c.vocab_size, m.Int("vocab_size", embd->ne[1], 1));
  SY_GET(int64_t layers, m.Int("block_count", std::nullopt, 1));
  // llama.cpp's own limit (LLAMA_MAX_LAYERS); the layer pattern below looks up tensors per layer.
  constexpr int64_t kMaxBlocks = 512;
  if (layers > kMaxBlocks) {
    return m.Error("block_count", "is " + std::to_string(layers) + ", more than llama.cpp's " +
                                      std::to_string(kMaxBlocks) + " (LLAMA_MAX_LAYERS)");
  }
  // glm4moe's block_count includes its multi-token-prediction blocks, stored last.
  SY_GET(int64_t nextn, m.Int("nextn_predict_layers", 0));
  if (nextn >= layers) {
    return m.Error("nextn_predict_layers", "is " + std::to_string(nextn) +
                                               ", not below block_count " + std::to_string(layers));
  }
  c.num_layers = static_cast<int>(layers - nextn);
  out.unused_trailing_layers = static_cast<int>(nextn);
  SY_GET(int64_t heads, m.Int("attention.head_count", std::nullopt, 1));
  c.num_heads = static_cast<int>(heads);
  SY_GET(int64_t kv_heads, m.Int("attention.head_count_kv", heads, 1));
  c.num_kv_heads = static_cast<int>(kv_heads);
  SY_GET(int64_t key_length, m.Int("attention.key_length", c.hidden_size / heads, 1));
  SY_GET(int64_t value_length, m.Int("attention.value_length", key_length, 1));
  if (value_length != key_length) {
    return m.Error("attention.value_length",
                   "differs from key_length; Switchyard's attention "
                   "has one head_dim");
  }
  if (key_length != c.hidden_size / heads) c.head_dim = key_length;
  SY_GET(int64_t rope_dims, m.Int("rope.dimension_count", key_length, 1));
  if (rope_dims != key_length) {
    if (*family != HfFamily::kGlm4Moe) {
      return m.Unsupported("rope.dimension_count", "partial RoPE is implemented for glm4moe only");
    }
    c.rotary_dim = rope_dims;  // Validate checks it is even and within the head
  }
  SY_GET(c.rope_theta, m.Double("rope.freq_base", 10000.0));
  SY_GET(c.rms_norm_eps, m.Double("attention.layer_norm_rms_epsilon", 1e-5));
  SY_GET(out.max_position_embeddings, m.Int("context_length", 0));
  SY_GET(int64_t experts, m.Int("expert_count", std::nullopt, 1));
  c.num_experts = static_cast<int>(experts);
  SY_GET(int64_t used, m.Int("expert_used_count", std::nullopt, 1));
  c.top_k = static_cast<int>(used);
  SY_GET(int64_t ff, m.Int("feed_forward_length", 0));
  if (out.family == HfFamily::kMixtral) {
    c.moe_intermediate_size = ff;
    c.intermediate_size = ff;
  } else {
    c.intermediate_size = ff;
    // llama.cpp's converter writes no expert_feed_forward_length for OLMoE, whose every layer is
    // MoE: its feed_forward_length is the experts' (HF intermediate_size).
    if (out.family == HfFamily::kOlmoe && ff > 0 &&
        m.Find("expert_feed_forward_length") == nullptr) {
      c.moe_intermediate_size = ff;
    } else {
      SY_GET(c.moe_intermediate_size, m.Int("expert_feed_forward_length", std::nullopt, 1));
    }
  }
  SY_GET(c.norm_topk_prob, m.Bool("expert_weights_norm", DefaultNormTopk(out.family)));
  const GgufValue* tied_copy = h.Find(kGgufTiedOutputKey);
  c.tie_word_embeddings =
      h.FindTensor("output.weight") == nullptr ||
      (tied_copy != nullptr && tied_copy->type == GgufValueType::kBool && tied_copy->b);
  c.attention_bias = h.FindTensor("blk.0.attn_q.bias") != nullptr;
  // Qwen3-MoE, OLMoE and DeepSeek with attention_bias put a bias on o as well (attn_output.bias).
  c.attention_out_bias = h.FindTensor("blk.0.attn_output.bias") != nullptr;
  switch (out.family) {
    case HfFamily::kMixtral:
      break;
    case HfFamily::kQwen2Moe: {
      SY_GET(c.shared_expert_intermediate_size,
             m.Int("expert_shared_feed_forward_length", std::nullopt, 1));
      c.num_shared_experts = 1;
      c.shared_expert_gate = true;
      break;
    }
    case HfFamily::kQwen3Moe:
      c.qk_norm = true;
      c.qk_norm_per_head = true;
      break;
    case HfFamily::kOlmoe:
      c.qk_norm = true;
      c.qk_norm_per_head = false;
      break;
    case HfFamily::kDeepseek: {
      SY_GET(int64_t shared, m.Int("expert_shared_count", 0));
      c.num_shared_experts = static_cast<int>(shared);
      break;
    }
    case HfFamily::kGlm4Moe: {
      SY_GET(int64_t shared, m.Int("expert_shared_count", 0));
      c.num_shared_experts = static_cast<int>(shared);
      c.qk_norm = h.FindTensor("blk.0.attn_q_norm.weight") != nullptr;
      c.qk_norm_per_head = true;
      c.router_scoring = RouterScoring::kSigmoid;
      SY_GET(int64_t groups, m.Int("expert_group_count", 1, 1));
      SY_GET(int64_t used_groups, m.Int("expert_group_used_count", groups, 1));
      c.num_expert_groups = static_cast<int>(groups);
      c.topk_groups = static_cast<int>(used_groups);
      break;
    }
  }
  // MoE layers are the ones with a router; they must be every moe_every-th layer from the first.
  std::vector<int> moe_layers;
  for (int l = 0; l < c.num_layers; ++l) {
    if (h.FindTensor("blk." + std::to_string(l) + ".ffn_gate_inp.weight") != nullptr) {
      moe_layers.push_back(l);
    }
  }
  if (moe_layers.empty()) {
    return InvalidArgumentError(file +
                                ": no layer has a router (blk.L.ffn_gate_inp.weight); "
                                "Switchyard runs mixture-of-experts models only");
  }
  c.first_k_dense = moe_layers[0];
  // One MoE layer fixes no period: take Qwen's decoder_sparse_step convention (the first MoE
  // layer is step - 1) when it fits, else any period that reaches past the last layer.
  const int first = moe_layers[0];
  c.moe_every = moe_layers.size() > 1           ? moe_layers[1] - first
                : 2 * first + 1 >= c.num_layers ? first + 1
                                                : c.num_layers - first;
  for (int l = 0; l < c.num_layers; ++l) {
    const bool moe = l >= c.first_k_dense && (l - c.first_k_dense) % c.moe_every == 0;
    if (moe != std::binary_search(moe_layers.begin(), moe_layers.end(), l)) {
      return InvalidArgumentError(
          file + ": layer " + std::to_string(l) + (moe ? " has no router" : " has a router") +
          ", breaking the pattern of MoE layers every " + std::to_string(c.moe_every) +
          " from layer " + std::to_string(c.first_k_dense) + " that Switchyard's model supports");
    }
  }
  if (out.family == HfFamily::kDeepseek || out.family == HfFamily::kGlm4Moe) {
    SY_GET(int64_t leading, m.Int("leading_dense_block_count", c.first_k_dense));
    if (leading != c.first_k_dense) {
      return m.Error("leading_dense_block_count", "is " + std::to_string(leading) +
                                                      ", but the first router is in layer " +
                                                      std::to_string(c.first_k_dense));
    }
  }
#undef SY_GET
  c.router_aux_loss_coef = 0;
  c.router_z_loss_coef = 0;
  if (Status s = c.Validate(); !s.ok()) return s.WithContext(file);
  return out;
}

}  // namespace sy
