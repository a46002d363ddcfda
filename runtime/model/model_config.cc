#include "runtime/model/model_config.h"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace sy {
namespace {

Status Bad(const std::string& field, const std::string& problem) {
  return InvalidArgumentError("model config: " + field + " " + problem);
}

}  // namespace

Status ModelConfig::Validate() const {
  if (vocab_size <= 0) return Bad("vocab_size", "must be > 0 (the tokenizer's vocabulary size)");
  if (hidden_size <= 0) return Bad("hidden_size", "must be > 0");
  if (num_layers <= 0) return Bad("num_layers", "must be > 0");
  if (num_heads <= 0) return Bad("num_heads", "must be > 0");
  if (num_kv_heads < 0) return Bad("num_kv_heads", "must be >= 0 (0 means num_heads)");
  if (num_heads % kv_heads() != 0) {
    return Bad("num_kv_heads", "(" + std::to_string(kv_heads()) + ") must divide num_heads (" +
                                   std::to_string(num_heads) + ")");
  }
  if (head_dim < 0) return Bad("head_dim", "must be >= 0 (0 means hidden_size / num_heads)");
  if (head_dim == 0 && hidden_size % num_heads != 0) {
    return Bad("head_dim", "is 0 but hidden_size (" + std::to_string(hidden_size) +
                               ") is not a multiple of num_heads (" + std::to_string(num_heads) +
                               "); set head_dim explicitly");
  }
  if (dim_per_head() % 2 != 0) {
    return Bad("head_dim", "(" + std::to_string(dim_per_head()) + ") must be even for RoPE");
  }
  if (num_experts < 0) return Bad("num_experts", "must be >= 0 (0 means a dense model)");
  if (first_k_dense < 0 || first_k_dense > num_layers) {
    return Bad("first_k_dense", "must be in [0, num_layers]");
  }
  if (moe_every < 1) return Bad("moe_every", "must be >= 1");
  if (num_experts > 0) {
    if (top_k < 1 || top_k > num_experts) {
      return Bad("top_k", "(" + std::to_string(top_k) + ") must be in [1, num_experts = " +
                              std::to_string(num_experts) + "]");
    }
    if (moe_intermediate_size <= 0) {
      return Bad("moe_intermediate_size", "must be > 0 when num_experts > 0");
    }
  }
  if (NumMoeLayers() < num_layers && intermediate_size <= 0) {
    return Bad("intermediate_size", "must be > 0: some layers have a dense FFN (first_k_dense = " +
                                        std::to_string(first_k_dense) +
                                        ", moe_every = " + std::to_string(moe_every) +
                                        ", num_experts = " + std::to_string(num_experts) + ")");
  }
  if (num_shared_experts < 0) return Bad("num_shared_experts", "must be >= 0");
  if (num_shared_experts > 0 && num_experts == 0) {
    return Bad("num_shared_experts", "needs num_experts > 0 (shared experts live in MoE layers)");
  }
  if (shared_expert_intermediate_size < 0) {
    return Bad("shared_expert_intermediate_size", "must be >= 0 (0 means moe_intermediate_size)");
  }
  if (shared_expert_gate && num_shared_experts == 0) {
    return Bad("shared_expert_gate", "needs num_shared_experts > 0");
  }
  if (!(capacity_factor >= 0.0) || !std::isfinite(capacity_factor)) {
    return Bad("capacity_factor", "must be >= 0 (0 means dropless)");
  }
  if (!(router_aux_loss_coef >= 0.0) || !std::isfinite(router_aux_loss_coef)) {
    return Bad("router_aux_loss_coef", "must be a finite value >= 0");
  }
  if (!(router_z_loss_coef >= 0.0) || !std::isfinite(router_z_loss_coef)) {
    return Bad("router_z_loss_coef", "must be a finite value >= 0");
  }
  if (pregate && NumMoeLayers() == 0) {
    return Bad("pregate", "needs at least one MoE layer (num_experts > 0)");
  }
  if (router_scoring == RouterScoring::kSigmoid && num_experts > 0) {
    if (num_expert_groups < 1 || num_experts % num_expert_groups != 0) {
      return Bad("num_expert_groups", "(" + std::to_string(num_expert_groups) +
                                          ") must be >= 1 and divide num_experts (" +
                                          std::to_string(num_experts) + ")");
    }
    if (num_expert_groups > 1 && num_experts / num_expert_groups < 2) {
      return Bad("num_expert_groups",
                 "leaves fewer than 2 experts per group (a group scores "
                 "by its best two)");
    }
    if (topk_groups < 1 || topk_groups > num_expert_groups) {
      return Bad("topk_groups", "(" + std::to_string(topk_groups) + ") must be in [1, " +
                                    "num_expert_groups = " + std::to_string(num_expert_groups) +
                                    "]");
    }
    if (top_k > topk_groups * (num_experts / num_expert_groups)) {
      return Bad("top_k", "(" + std::to_string(top_k) +
                              ") exceeds the experts in the topk_groups chosen groups");
    }
    if (!(routed_scaling_factor > 0.0) || !std::isfinite(routed_scaling_factor)) {
      return Bad("routed_scaling_factor", "must be a finite value > 0");
    }
    if (router_z_loss_coef > 0.0) {
      return Bad("router_z_loss_coef",
                 "must be 0 with sigmoid routing (the z-loss is on "
                 "softmax logits)");
    }
    if (pregate) {
      return Bad("pregate", "is not implemented with sigmoid routing (router_scoring)");
    }
  }
  if (rotary_dim < 0 || rotary_dim % 2 != 0 || rotary_dim > dim_per_head()) {
    return Bad("rotary_dim", "(" + std::to_string(rotary_dim) +
                                 ") must be even and in [0, head_dim = " +
                                 std::to_string(dim_per_head()) + "] (0 means the whole head)");
  }
  if (!(rope_theta > 0.0) || !std::isfinite(rope_theta)) {
    return Bad("rope_theta", "must be > 0");
  }
  if (!(rms_norm_eps > 0.0) || !std::isfinite(rms_norm_eps)) {
    return Bad("rms_norm_eps", "must be > 0");
  }
  return Status::Ok();
}

bool ModelConfig::IsMoeLayer(int layer) const {
  return num_experts > 0 && layer >= first_k_dense && layer < num_layers && moe_every > 0 &&
         (layer - first_k_dense) % moe_every == 0;
}

int ModelConfig::MoeIndex(int layer) const {
  if (!IsMoeLayer(layer)) return -1;
  return (layer - first_k_dense) / moe_every;
}

int ModelConfig::NumMoeLayers() const {
  // Layers first_k_dense, first_k_dense + moe_every, ... below num_layers, counted in O(1): a
  // config claiming 10^9 layers is refused at once, where a walk over them took 12 s.
  if (num_experts <= 0 || moe_every <= 0) return 0;
  int64_t first = first_k_dense;
  if (first < 0) first += (-first + moe_every - 1) / moe_every * moe_every;  // the first layer >= 0
  if (first >= num_layers) return 0;
  return static_cast<int>((num_layers - 1 - first) / moe_every + 1);
}

int64_t ModelConfig::NumExpertParameters() const {
  return static_cast<int64_t>(NumMoeLayers()) * num_experts * 3 * hidden_size *
         moe_intermediate_size;
}

int64_t ModelConfig::NumParameters() const {
  const int64_t h = hidden_size, d = dim_per_head();
  const int64_t q_out = num_heads * d, kv_out = kv_heads() * d;
  int64_t per_layer_attention = h * q_out + 2 * h * kv_out + q_out * h + 2 * h;  // + 2 norms
  if (attention_bias) per_layer_attention += q_out + 2 * kv_out;
  if (attention_out_bias) per_layer_attention += h;
  if (qk_norm) per_layer_attention += qk_norm_per_head ? 2 * d : q_out + kv_out;
  int64_t total = vocab_size * h + h;  // embedding, final norm
  if (!tie_word_embeddings) total += vocab_size * h;
  for (int l = 0; l < num_layers; ++l) {
    total += per_layer_attention;
    const int m = MoeIndex(l);
    if (m < 0) {
      total += 3 * h * intermediate_size;
      continue;
    }
    if (MoeLayerHasGate(m)) total += num_experts * h;
    if (router_scoring == RouterScoring::kSigmoid) total += num_experts;  // the expert bias
    if (MoeLayerHasPregate(m)) total += num_experts * h;
    total += 3 * h * shared_intermediate() + (shared_expert_gate ? h : 0);
  }
  return total + NumExpertParameters();
}

std::string ModelConfig::Summary() const {
  std::ostringstream s;
  const int moe = NumMoeLayers();
  s << num_layers << (num_layers == 1 ? " layer" : " layers");
  if (moe > 0 && moe < num_layers) s << " (" << moe << " MoE)";
  if (num_experts > 0) {
    s << ", " << num_experts << " experts (top-" << top_k << ")";
    if (num_shared_experts > 0) s << " + " << num_shared_experts << " shared";
  }
  if (pregate) s << ", pre-gated";
  s << ", hidden " << hidden_size << ", ";
  const double params = static_cast<double>(NumParameters());
  char count[32];
  if (params >= 1e9) {
    std::snprintf(count, sizeof(count), "%.1f B", params / 1e9);
  } else if (params < 5e4) {
    std::snprintf(count, sizeof(count), "%.1f K", params / 1e3);
  } else {
    std::snprintf(count, sizeof(count), "%.1f M", params / 1e6);
  }
  s << count << " parameters";
  return s.str();
}

std::string ModelConfig::ToString() const {
  std::ostringstream s;
  s << "vocab=" << vocab_size << " hidden=" << hidden_size << " layers=" << num_layers
    << " heads=" << num_heads << "/" << num_kv_heads << "x" << head_dim
    << " ffn=" << intermediate_size << " experts=" << num_experts << " top" << top_k
    << " moe_ffn=" << moe_intermediate_size << " renorm=" << norm_topk_prob
    << " shared=" << num_shared_experts << "x" << shared_expert_intermediate_size
    << (shared_expert_gate ? "+gate" : "") << " first_k_dense=" << first_k_dense
    << " moe_every=" << moe_every << " capacity=" << capacity_factor
    << " aux=" << router_aux_loss_coef << " z=" << router_z_loss_coef << " pregate=" << pregate
    << " scoring=" << (router_scoring == RouterScoring::kSigmoid ? "sigmoid" : "softmax")
    << " groups=" << topk_groups << "/" << num_expert_groups
    << " routed_scale=" << routed_scaling_factor << " rope_theta=" << rope_theta
    << " rotary_dim=" << rotary_dim << " eps=" << rms_norm_eps << " qk_norm=" << qk_norm
    << (qk_norm_per_head ? "/head" : "/full") << " bias=" << attention_bias
    << " out_bias=" << attention_out_bias << " tied=" << tie_word_embeddings
    << " recompute=" << recompute;
  return s.str();
}

}  // namespace sy
