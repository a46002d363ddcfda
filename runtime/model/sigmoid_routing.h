// Sigmoid routing with a correction bias and group-limited top-k, on the host: GLM-4.5's and
// DeepSeek-V3's router (Hugging Face Glm4MoeTopkRouter / DeepseekV3TopkRouter, topk_method
// "noaux_tc"), computed in f32 as transformers computes it.
//
//   score[e]  = sigmoid(logit[e])
//   choice[e] = score[e] + bias[e]                          (bias: e_score_correction_bias)
//   groups    : the E experts in num_groups equal groups; a group's worth is the sum of its two
//               largest choice values; the best topk_groups groups stay, the other experts'
//               choice becomes 0 (as transformers' masked_fill(..., 0.0), not -inf)
//   experts   = the top_k of choice, descending; equal values keep the lower expert first
//   weights   = score at those experts, divided by (their sum + 1e-20) with norm_topk_prob,
//               times routed_scaling_factor
//
// The bias only chooses; it never enters the weights.
// Ownership: value types and pure functions. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace sy {

struct SigmoidRoutingOptions {
  int num_experts = 0;                 // Default: 0, must be set
  int top_k = 1;                       // Default: 1
  int num_groups = 1;                  // Default: 1 (HF n_group)
  int topk_groups = 1;                 // Default: 1 (HF topk_group)
  bool norm_topk_prob = true;          // Default: true
  float routed_scaling_factor = 1.0f;  // Default: 1
};

struct SigmoidRouting {
  std::vector<int32_t> experts;  // [n * top_k]: token t's j-th choice at t * top_k + j
  std::vector<float> weights;    // [n * top_k], in the order of experts
};

// logits [n, num_experts] row-major; bias [num_experts] or empty (zeros). The options must be
// valid (ModelConfig::Validate checks them): checked.
SigmoidRouting SigmoidRoute(std::span<const float> logits, std::span<const float> bias,
                            const SigmoidRoutingOptions& options);

}  // namespace sy
