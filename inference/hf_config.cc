#include "inference/hf_config.h"

#include "runtime/core/read_file.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

namespace sy {
namespace {

using nlohmann::json;

constexpr size_t kMaxConfigBytes = 16 << 20;

// Field access with errors naming the file and the key.
class Fields {
 public:
  Fields(const json& root, std::string file, std::string model_type)
      : root_(root), file_(std::move(file)), model_type_(std::move(model_type)) {}

  bool Has(const std::string& key) const {
    auto it = root_.find(key);
    return it != root_.end() && !it->is_null();
  }

  Status Error(const std::string& key, const std::string& why) const {
    return InvalidArgumentError(file_ + ": " + key + " " + why);
  }
  Status Unsupported(const std::string& key, const std::string& why) const {
    auto it = root_.find(key);
    return UnimplementedError(file_ + ": " + model_type_ + " with " + key + " = " +
                              (it == root_.end() ? std::string("?") : it->dump()) +
                              " is not supported: " + why);
  }

  Result<int64_t> Int(const std::string& key, std::optional<int64_t> fallback,
                      int64_t min_value = 0) const {
    auto it = root_.find(key);
    if (it == root_.end() || it->is_null()) {
      if (fallback) return *fallback;
      return Error(key, "is missing; a " + model_type_ + " config.json must set it");
    }
    if (!it->is_number_integer()) return Error(key, "is " + it->dump() + ", expected an integer");
    if (it->is_number_unsigned() &&
        it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      return Error(key, "is " + it->dump() + ", too large");
    }
    const int64_t v = it->get<int64_t>();
    if (v < min_value || v > std::numeric_limits<int32_t>::max()) {
      return Error(
          key, "is " + std::to_string(v) + ", expected an integer >= " + std::to_string(min_value));
    }
    return v;
  }

  Result<double> Double(const std::string& key, double fallback) const {
    auto it = root_.find(key);
    if (it == root_.end() || it->is_null()) return fallback;
    if (!it->is_number()) return Error(key, "is " + it->dump() + ", expected a number");
    const double v = it->get<double>();
    if (!std::isfinite(v)) return Error(key, "is not finite");
    return v;
  }

  Result<bool> Bool(const std::string& key, bool fallback) const {
    auto it = root_.find(key);
    if (it == root_.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) return Error(key, "is " + it->dump() + ", expected true or false");
    return it->get<bool>();
  }

  Result<std::string> String(const std::string& key, const std::string& fallback) const {
    auto it = root_.find(key);
    if (it == root_.end() || it->is_null()) return fallback;
    if (!it->is_string()) return Error(key, "is " + it->dump() + ", expected a string");
    return it->get<std::string>();
  }

  const json& root() const { return root_; }
  const std::string& file() const { return file_; }

 private:
  const json& root_;
  std::string file_;
  std::string model_type_;
};

#define SY_GET(var, expr) SY_ASSIGN_OR_RETURN(var, expr)

// Rejects settings that change the math in ways the model does not implement.
Status CheckCommon(const Fields& f, int64_t max_positions) {
  SY_GET(std::string act, f.String("hidden_act", "silu"));
  if (act != "silu" && act != "swish") {
    return f.Unsupported("hidden_act", "Switchyard's experts are SwiGLU (silu)");
  }
  if (f.Has("rope_scaling")) {
    return f.Unsupported("rope_scaling",
                         "only plain RoPE is implemented; remove rope_scaling "
                         "(set it to null) to run within the original context");
  }
  if (f.Has("clip_qkv")) {
    return f.Unsupported("clip_qkv", "q/k/v clipping is not implemented");
  }
  if (f.Has("pretraining_tp")) {
    SY_GET(int64_t tp, f.Int("pretraining_tp", 1, 1));
    (void)tp;  // a different summation order of the same math
  }
  // A sliding window matters only when it is shorter than the context the model can see.
  bool use_window = true;
  if (f.root().contains("use_sliding_window")) {
    SY_GET(use_window, f.Bool("use_sliding_window", false));
  }
  if (use_window && f.Has("sliding_window")) {
    SY_GET(int64_t window, f.Int("sliding_window", 0));
    if (max_positions == 0 || window < max_positions) {
      return f.Unsupported("sliding_window",
                           "sliding-window attention is not implemented (the window is shorter "
                           "than max_position_embeddings = " +
                               std::to_string(max_positions) + ")");
    }
  }
  return Status::Ok();
}

// The attention and embedding fields every family spells the same way.
Status ParseCommon(const Fields& f, ModelConfig& c, double default_theta, double default_eps) {
  SY_GET(c.vocab_size, f.Int("vocab_size", std::nullopt, 1));
  SY_GET(c.hidden_size, f.Int("hidden_size", std::nullopt, 1));
  SY_GET(int64_t layers, f.Int("num_hidden_layers", std::nullopt, 1));
  c.num_layers = static_cast<int>(layers);
  SY_GET(int64_t heads, f.Int("num_attention_heads", std::nullopt, 1));
  c.num_heads = static_cast<int>(heads);
  SY_GET(int64_t kv, f.Int("num_key_value_heads", heads, 1));
  c.num_kv_heads = static_cast<int>(kv);
  SY_GET(c.head_dim, f.Int("head_dim", 0));
  SY_GET(c.rope_theta, f.Double("rope_theta", default_theta));
  SY_GET(c.rms_norm_eps, f.Double("rms_norm_eps", default_eps));
  SY_GET(c.tie_word_embeddings, f.Bool("tie_word_embeddings", false));
  SY_GET(int64_t topk, f.Int("num_experts_per_tok", std::nullopt, 1));
  c.top_k = static_cast<int>(topk);
  SY_GET(c.router_aux_loss_coef, f.Double("router_aux_loss_coef", 0.0));
  if (c.router_aux_loss_coef < 0) c.router_aux_loss_coef = 0;
  return Status::Ok();
}

// The experts' fields DeepSeek's config.json names and GLM-4.5's repeats: n_routed_experts,
// moe_intermediate_size, n_shared_experts (fused into one MLP), and the dense layers' width.
Status ParseDeepseekExperts(const Fields& f, ModelConfig& c, int64_t default_shared) {
  SY_GET(int64_t experts, f.Int("n_routed_experts", std::nullopt, 1));
  c.num_experts = static_cast<int>(experts);
  SY_GET(c.intermediate_size, f.Int("intermediate_size", 0));
  SY_GET(c.moe_intermediate_size, f.Int("moe_intermediate_size", std::nullopt, 1));
  SY_GET(int64_t shared, f.Int("n_shared_experts", default_shared));
  c.num_shared_experts = static_cast<int>(shared);
  return Status::Ok();
}

// Qwen's decoder_sparse_step and mlp_only_layers: layer l is MoE iff l is not in mlp_only_layers
// and (l + 1) % step == 0. Representable when mlp_only_layers is empty, or is a prefix [0, k)
// with step 1.
Status ParseQwenSparsity(const Fields& f, ModelConfig& c) {
  SY_GET(int64_t step, f.Int("decoder_sparse_step", 1, 1));
  std::vector<int64_t> mlp_only;
  auto it = f.root().find("mlp_only_layers");
  if (it != f.root().end() && !it->is_null()) {
    if (!it->is_array()) return f.Error("mlp_only_layers", "is not a list of layer indices");
    for (const json& v : *it) {
      if (!v.is_number_integer()) return f.Error("mlp_only_layers", "has a non-integer entry");
      mlp_only.push_back(v.get<int64_t>());
    }
  }
  if (mlp_only.empty()) {
    c.first_k_dense = static_cast<int>(step - 1);
    c.moe_every = static_cast<int>(step);
    return Status::Ok();
  }
  bool prefix = step == 1;
  for (size_t i = 0; i < mlp_only.size(); ++i) prefix = prefix && mlp_only[i] == int64_t(i);
  if (!prefix) {
    return f.Unsupported("mlp_only_layers",
                         "dense layers must be the first k layers with "
                         "decoder_sparse_step = 1");
  }
  c.first_k_dense = static_cast<int>(mlp_only.size());
  c.moe_every = 1;
  return Status::Ok();
}

Result<HfModelConfig> ParseFamily(const Fields& f, HfFamily family) {
  HfModelConfig out;
  out.family = family;
  ModelConfig& c = out.config;
  SY_GET(out.max_position_embeddings, f.Int("max_position_embeddings", 0));
  SY_RETURN_IF_ERROR(CheckCommon(f, out.max_position_embeddings));
  switch (family) {
    case HfFamily::kMixtral: {
      SY_RETURN_IF_ERROR(ParseCommon(f, c, 1e6, 1e-5));
      SY_GET(int64_t experts, f.Int("num_local_experts", std::nullopt, 1));
      c.num_experts = static_cast<int>(experts);
      SY_GET(c.moe_intermediate_size, f.Int("intermediate_size", std::nullopt, 1));
      c.intermediate_size = c.moe_intermediate_size;
      c.norm_topk_prob = true;
      break;
    }
    case HfFamily::kQwen2Moe:
    case HfFamily::kQwen3Moe: {
      SY_RETURN_IF_ERROR(ParseCommon(f, c, 1e4, 1e-6));
      SY_GET(int64_t experts, f.Int("num_experts", std::nullopt, 1));
      c.num_experts = static_cast<int>(experts);
      SY_GET(c.intermediate_size, f.Int("intermediate_size", 0));
      SY_GET(c.moe_intermediate_size, f.Int("moe_intermediate_size", std::nullopt, 1));
      SY_GET(c.norm_topk_prob, f.Bool("norm_topk_prob", false));
      SY_RETURN_IF_ERROR(ParseQwenSparsity(f, c));
      if (family == HfFamily::kQwen2Moe) {
        // Qwen2-MoE's q/k/v projections carry a bias unless "qkv_bias": false says otherwise
        // (o never has one); without the key the loader looks for the bias tensors
        // (HfModelConfig::attention_bias_from_checkpoint). Every MoE block has one
        // sigmoid-gated shared expert.
        out.attention_bias_from_checkpoint = !f.Has("qkv_bias");
        SY_GET(c.attention_bias, f.Bool("qkv_bias", true));
        SY_GET(c.shared_expert_intermediate_size,
               f.Int("shared_expert_intermediate_size", std::nullopt, 1));
        c.num_shared_experts = 1;
        c.shared_expert_gate = true;
      } else {
        SY_GET(c.attention_bias, f.Bool("attention_bias", false));
        c.attention_out_bias = c.attention_bias;  // transformers: q, k, v and o
        c.qk_norm = true;
        c.qk_norm_per_head = true;
      }
      break;
    }
    case HfFamily::kOlmoe: {
      SY_RETURN_IF_ERROR(ParseCommon(f, c, 1e4, 1e-5));
      SY_GET(int64_t experts, f.Int("num_experts", std::nullopt, 1));
      c.num_experts = static_cast<int>(experts);
      SY_GET(c.moe_intermediate_size, f.Int("intermediate_size", std::nullopt, 1));
      c.intermediate_size = c.moe_intermediate_size;
      SY_GET(c.norm_topk_prob, f.Bool("norm_topk_prob", false));
      SY_GET(c.attention_bias, f.Bool("attention_bias", false));
      c.attention_out_bias = c.attention_bias;  // transformers: q, k, v and o
      c.qk_norm = true;
      c.qk_norm_per_head = false;
      break;
    }
    case HfFamily::kDeepseek: {
      SY_RETURN_IF_ERROR(ParseCommon(f, c, 1e4, 1e-6));
      SY_GET(std::string scoring, f.String("scoring_func", "softmax"));
      if (scoring != "softmax") {
        return f.Unsupported("scoring_func", "DeepSeek-MoE v1 routing is softmax");
      }
      SY_RETURN_IF_ERROR(ParseDeepseekExperts(f, c, /*default_shared=*/0));
      SY_GET(int64_t first_k, f.Int("first_k_dense_replace", 0));
      SY_GET(int64_t freq, f.Int("moe_layer_freq", 1, 1));
      // DeepSeek: layer l is MoE iff l >= first_k_dense_replace and l % moe_layer_freq == 0;
      // ours counts from first_k_dense, which agrees when freq divides first_k_dense_replace.
      if (first_k % freq != 0) {
        return f.Unsupported("moe_layer_freq", "moe_layer_freq must divide first_k_dense_replace");
      }
      c.first_k_dense = static_cast<int>(first_k);
      c.moe_every = static_cast<int>(freq);
      SY_GET(c.norm_topk_prob, f.Bool("norm_topk_prob", false));
      SY_GET(c.attention_bias, f.Bool("attention_bias", false));
      c.attention_out_bias = c.attention_bias;  // modeling_deepseek.py: q, k, v and o
      break;
    }
    case HfFamily::kGlm4Moe: {
      SY_RETURN_IF_ERROR(ParseCommon(f, c, 1e4, 1e-5));
      SY_RETURN_IF_ERROR(ParseDeepseekExperts(f, c, /*default_shared=*/1));
      SY_GET(int64_t first_k, f.Int("first_k_dense_replace", 1));
      c.first_k_dense = static_cast<int>(first_k);
      SY_GET(c.norm_topk_prob, f.Bool("norm_topk_prob", true));
      SY_GET(c.attention_bias, f.Bool("attention_bias", false));  // q, k, v; o has none
      SY_GET(c.qk_norm, f.Bool("use_qk_norm", false));
      c.qk_norm_per_head = true;
      c.router_scoring = RouterScoring::kSigmoid;
      SY_GET(int64_t groups, f.Int("n_group", 1, 1));
      SY_GET(int64_t topk_groups, f.Int("topk_group", 1, 1));
      c.num_expert_groups = static_cast<int>(groups);
      c.topk_groups = static_cast<int>(topk_groups);
      SY_GET(c.routed_scaling_factor, f.Double("routed_scaling_factor", 1.0));
      // transformers: rotary dim = int(head_dim * partial_rotary_factor), default 0.5.
      SY_GET(double factor, f.Double("partial_rotary_factor", 0.5));
      const int64_t head_dim = c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_heads;
      const double rotary = static_cast<double>(head_dim) * factor;
      if (!(factor > 0.0 && factor <= 1.0) || static_cast<int64_t>(rotary) < 2 ||
          static_cast<int64_t>(rotary) % 2 != 0) {
        return f.Error("partial_rotary_factor",
                       "must be in (0, 1] and give an even rotary dim of at least 2 (head_dim " +
                           std::to_string(head_dim) + " x factor = " + std::to_string(rotary) +
                           ")");
      }
      c.rotary_dim = static_cast<int64_t>(rotary);
      SY_GET(int64_t nextn, f.Int("num_nextn_predict_layers", 0));
      out.unused_trailing_layers = static_cast<int>(nextn);
      break;
    }
  }
  c.router_z_loss_coef = 0;
  if (Status s = c.Validate(); !s.ok()) return s.WithContext(f.file());
  return out;
}

#undef SY_GET

}  // namespace

std::string_view HfFamilyDisplayName(HfFamily family) {
  switch (family) {
    case HfFamily::kMixtral:
      return "Mixtral";
    case HfFamily::kQwen2Moe:
      return "Qwen2-MoE";
    case HfFamily::kQwen3Moe:
      return "Qwen3-MoE";
    case HfFamily::kOlmoe:
      return "OLMoE";
    case HfFamily::kDeepseek:
      return "DeepSeek-MoE";
    case HfFamily::kGlm4Moe:
      return "GLM-4.5";
  }
  return "?";
}

std::string_view HfFamilyModelType(HfFamily family) {
  switch (family) {
    case HfFamily::kMixtral:
      return "mixtral";
    case HfFamily::kQwen2Moe:
      return "qwen2_moe";
    case HfFamily::kQwen3Moe:
      return "qwen3_moe";
    case HfFamily::kOlmoe:
      return "olmoe";
    case HfFamily::kDeepseek:
      return "deepseek";
    case HfFamily::kGlm4Moe:
      return "glm4_moe";
  }
  return "?";
}

bool InUnusedTrailingLayer(const HfModelConfig& hf, std::string_view hf_name) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (hf.unused_trailing_layers <= 0 || !hf_name.starts_with(kPrefix)) return false;
  const size_t dot = hf_name.find('.', kPrefix.size());
  if (dot == std::string_view::npos || dot == kPrefix.size() || dot - kPrefix.size() > 9) {
    return false;
  }
  int64_t layer = 0;
  for (size_t i = kPrefix.size(); i < dot; ++i) {
    if (hf_name[i] < '0' || hf_name[i] > '9') return false;
    layer = layer * 10 + (hf_name[i] - '0');
  }
  return layer >= hf.config.num_layers &&
         layer < int64_t{hf.config.num_layers} + hf.unused_trailing_layers;
}

Result<HfModelConfig> ParseHfConfig(std::string_view json_text, std::string_view file) {
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/true,
                       /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    return InvalidArgumentError(std::string(file) + ": not valid JSON (" + e.what() + ")");
  }
  if (!root.is_object()) return InvalidArgumentError(std::string(file) + ": not a JSON object");
  auto it = root.find("model_type");
  if (it == root.end() || !it->is_string()) {
    return InvalidArgumentError(std::string(file) +
                                ": no \"model_type\" string; is this a Hugging Face config.json?");
  }
  const std::string model_type = it->get<std::string>();
  for (HfFamily family : {HfFamily::kMixtral, HfFamily::kQwen2Moe, HfFamily::kQwen3Moe,
                          HfFamily::kOlmoe, HfFamily::kDeepseek, HfFamily::kGlm4Moe}) {
    if (HfFamilyModelType(family) == model_type) {
      Fields fields(root, std::string(file), model_type);
      Result<HfModelConfig> parsed = ParseFamily(fields, family);
      if (!parsed.ok()) return parsed.status();
      return parsed;
    }
  }
  return UnimplementedError(std::string(file) + ": model_type \"" + model_type +
                            "\" is not supported; supported: mixtral, qwen2_moe, qwen3_moe, "
                            "olmoe, deepseek, glm4_moe");
}

Result<HfModelConfig> LoadHfConfig(const std::string& dir) {
  const std::string path = dir + "/config.json";
  Result<std::string> text = ReadFile(path, kMaxConfigBytes, "a model config");
  if (!text.ok() && text.status().code() == StatusCode::kNotFound) {
    return NotFoundError(path +
                         " does not exist; point --model at a Hugging Face model "
                         "directory (config.json + *.safetensors), a .gguf file, or a "
                         "training checkpoint (a step-*.h5 file or its checkpoint.dir)");
  }
  if (!text.ok()) return text.status();
  return ParseHfConfig(*text, path);
}

}  // namespace sy
