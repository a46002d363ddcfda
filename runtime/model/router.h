// Router: from router logits to routing decisions, combine weights and the router losses, and the
// backward of all three.
//
//   probs   = softmax(logits)                         [N, E]
//   experts = top-k of logits per token, descending; equal logits keep the lower expert first
//   weights = probs at the chosen experts             [N, k]
//             or, with norm_topk_prob, those renormalised to sum to 1, computed exactly as
//             softmax over the k chosen logits (the same value, and its backward is one op)
//   aux     = E * sum_e f_e * P_e   (Switch / GShard load balancing)
//             f_e = (token-slots routed to e, before any capacity drop) / (N * k),
//             P_e = mean over tokens of probs[:, e]. f is a constant for the gradient.
//             Perfect balance gives 1.
//   z       = mean over tokens of logsumexp(logits)^2  (ST-MoE router z-loss)
// aux and z are written raw (no coefficient) into a device slot; Backward adds
// aux_coef * d(aux) + z_coef * d(z) to the gradient of the logits.
//
// With scoring kSigmoid (GLM-4.5, DeepSeek-V3) the choice and the weights are those of
// runtime/model/sigmoid_routing.h, computed on the host from the downloaded logits; inference
// only (no stats, no Backward).
//
// The chosen experts are copied to the host (one synchronisation per call): the grouped GEMM needs
// per-expert row counts on the host anyway.
// Ownership: keeps views of its activations until Release. Thread-safety: as the Backend's
// operators.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/model/model_config.h"

namespace sy {

struct RouterOptions {
  int num_experts = 0;                              // Default: 0, must be set
  int top_k = 1;                                    // Default: 1
  bool norm_topk_prob = true;                       // Default: true
  float aux_loss_coef = 0.0f;                       // Default: 0
  float z_loss_coef = 0.0f;                         // Default: 0
  RouterScoring scoring = RouterScoring::kSoftmax;  // Default: softmax
  // kSigmoid only: groups, the weights' factor, and the correction bias f32 [E] on the backend
  // (a view of the parameter layers/{L}/moe/expert_bias; undefined = zeros).
  int num_groups = 1;                  // Default: 1
  int topk_groups = 1;                 // Default: 1
  float routed_scaling_factor = 1.0f;  // Default: 1
  Tensor expert_bias = {};
};

class Router {
 public:
  explicit Router(RouterOptions options = {}) : options_(options) {}

  // logits f32 [N, E] on the backend. stats f32 [2] on the backend receives {aux, z}; undefined
  // (inference) skips them and the work they take, and then Backward may not follow.
  Status Forward(Backend& backend, const Tensor& logits, const Tensor& stats);

  // The expert of each token-slot, slot n*k + j = token n's j-th choice (host, [N*k]).
  const std::vector<int32_t>& slot_experts() const { return slot_experts_; }
  // Combine weights [N, k] on the backend, in the order of slot_experts.
  const Tensor& weights() const { return weights_; }
  const Tensor& probs() const { return probs_; }

  // d_weights f32 [N, k] (zero for dropped slots) -> d_logits f32 [N, E] (overwritten), including
  // the aux and z terms scaled by their coefficients and by loss_scale().
  Status Backward(Backend& backend, const Tensor& d_weights, const Tensor& d_logits);
  // A factor on the gradient of the aux and z terms (not on what Forward reports), for the next
  // Forward and Backward: a micro-batch's share of a step, times a loss scale. Default: 1.
  void set_loss_scale(float scale) { loss_scale_ = scale; }
  float loss_scale() const { return loss_scale_; }
  void Release();

  const RouterOptions& options() const { return options_; }

 private:
  Status ForwardSigmoid(Backend& backend, const Tensor& logits);

  RouterOptions options_;
  float loss_scale_ = 1.0f;
  std::vector<int32_t> slot_experts_;
  Tensor logits_, probs_, top_logits_, weights_, flat_index_, lse_, aux_grad_;
};

}  // namespace sy
