// MoeLayer: the MoE FFN of one decoder layer, and its backward.
//
//   logits  = h Wgate^T                           (own gate), or the logits the previous MoE
//                                                 layer's pre-gate computed (pre-gated layers)
//   Route   -> combine weights [N, k], aux, z     (runtime/model/router.h)
//   pregate_logits = h Wpregate^T [N, E]          (pre-gate for the next MoE layer, optional;
//                                                 before the experts, so the routing hook sees it)
//   Permute -> rows grouped by expert, capacity   (dispatch_plan.h, token_permutation.h)
//   ExpertCompute::Routed, then ExpertCompute over the grouped rows
//                                                 (expert_compute.h: the expert-parallel and
//                                                 inference-provider seam)
//   Unpermute: out[n] = sum_j w[n, j] * expert_{e(n, j)}(h[n])   (dropped slots contribute 0)
//   out += SharedExperts(h)                       (optional)
//
// Parameters: layers/{L}/moe/gate [E, H] when the layer has its own gate; layers/{L}/moe/pregate
// [E, H] when it holds a pre-gate; the experts and shared experts (see their headers).
//
// Pre-gate gradients. The next MoE layer's Backward yields routed_logits_grad(): the gradient of
// the loss wrt the logits it was routed by. The model passes it to this layer's Backward as
// d_pregate_logits, which flows into Wpregate and into h.
//
// Ownership: owns its router, permutation, experts and shared experts; activations until Release.
// Thread-safety: as the Backend's operators.
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/model/dispatch_plan.h"
#include "runtime/model/expert_compute.h"
#include "runtime/model/linear.h"
#include "runtime/model/model_config.h"
#include "runtime/model/parameter_store.h"
#include "runtime/model/router.h"
#include "runtime/model/shared_experts.h"
#include "runtime/model/token_permutation.h"

namespace sy {

// Makes a layer's expert computation and registers the expert parameters it holds in `store`
// (expert parallelism: parallel/expert_parallel_compute.h registers only its rank's experts).
using ExpertComputeFactory = std::function<Result<std::unique_ptr<ExpertCompute>>(
    Backend& backend, ParameterStore& store, int layer, DType weight_dtype, bool with_grad)>;

class MoeLayer {
 public:
  // Registers the layer's router, pre-gate, experts and shared experts for decoder layer `layer`.
  // `make_experts` (optional) replaces the default LocalExpertCompute over all experts; it is
  // called where the experts are registered, so registration order stays the same.
  static Result<std::unique_ptr<MoeLayer>> Create(Backend& backend, ParameterStore& store,
                                                  const ModelConfig& config, int layer,
                                                  DType weight_dtype, bool with_grad,
                                                  const ExpertComputeFactory& make_experts = {});

  // h [N, H] -> out [N, H]. N may be 0 (an expert-parallel rank without tokens): the experts'
  // Forward and Backward are still called, with zero rows, so the rank joins their collectives.
  // routed_logits [N, E]: the previous layer's pre-gate logits when this layer has no gate of its
  // own (has_gate() false); undefined otherwise. stats f32 [2] on the backend receives {aux, z} for
  // this layer's routing; undefined (inference) computes neither, and Backward may not follow.
  Status Forward(Backend& backend, const Tensor& h, const Tensor& routed_logits,
                 const Tensor& stats, const Tensor& out);
  // The pre-gate's logits for the next MoE layer [N, E] (defined after Forward when
  // has_pregate()).
  const Tensor& pregate_logits() const { return pregate_logits_; }

  // dout [N, H] -> dh [N, H] (overwritten). d_pregate_logits: the next MoE layer's
  // routed_logits_grad() when has_pregate(), else undefined.
  Status Backward(Backend& backend, const Tensor& dout, const Tensor& d_pregate_logits,
                  const Tensor& dh);
  // The gradient wrt the routed_logits given to Forward (after Backward, when !has_gate()).
  const Tensor& routed_logits_grad() const { return d_routed_logits_; }

  // Drops the activations kept for Backward. The outputs pregate_logits() and
  // routed_logits_grad() stay valid until the next Forward / Backward replaces them (the
  // neighbouring MoE layers and recomputation need them; they are [N, E], small).
  void Release();

  bool has_gate() const { return has_gate_; }
  bool has_pregate() const { return has_pregate_; }
  // Router::set_loss_scale of this layer's router.
  void set_router_loss_scale(float scale) { router_.set_loss_scale(scale); }
  // The routing of the last Forward (kept after Release).
  const DispatchPlan& plan() const { return plan_; }
  // Replaces the expert computation (expert parallelism, inference expert providers) and returns
  // the one it replaces. The layer's expert parameters stay registered as created; the replacement
  // decides which ones it uses.
  std::unique_ptr<ExpertCompute> set_expert_compute(std::unique_ptr<ExpertCompute> experts) {
    std::swap(experts_, experts);
    return experts;
  }
  ExpertCompute& expert_compute() { return *experts_; }

 private:
  MoeLayer() = default;
  // Forward with no tokens: no routing, zero stats, the experts called with zero rows.
  Status ForwardEmpty(Backend& backend, int64_t hidden, const Tensor& stats);

  int num_experts_ = 0;
  int top_k_ = 0;
  double capacity_factor_ = 0.0;
  bool has_gate_ = true;
  bool has_pregate_ = false;
  bool has_shared_ = false;
  Linear gate_, pregate_;
  Router router_;
  TokenPermutation permutation_;
  std::unique_ptr<ExpertCompute> experts_;
  SharedExperts shared_;
  DispatchPlan plan_;

  Tensor h_, logits_, xs_, ys_, pregate_logits_, d_routed_logits_;
};

}  // namespace sy
