#include "runtime/model/moe_layer.h"

#include <string>

#include "runtime/core/check.h"
#include "runtime/model/host_transfer.h"

namespace sy {

Result<std::unique_ptr<MoeLayer>> MoeLayer::Create(Backend& backend, ParameterStore& store,
                                                   const ModelConfig& config, int layer,
                                                   DType weight_dtype, bool with_grad,
                                                   const ExpertComputeFactory& make_experts) {
  const int m = config.MoeIndex(layer);
  SY_CHECK_GE(m, 0) << "layer " << layer << " is not an MoE layer";
  std::unique_ptr<MoeLayer> moe(new MoeLayer());
  moe->num_experts_ = config.num_experts;
  moe->top_k_ = config.top_k;
  moe->capacity_factor_ = config.capacity_factor;
  moe->has_gate_ = config.MoeLayerHasGate(m);
  moe->has_pregate_ = config.MoeLayerHasPregate(m);
  moe->has_shared_ = config.num_shared_experts > 0;
  const std::string p = "layers/" + std::to_string(layer) + "/moe/";
  const int64_t h = config.hidden_size;
  if (moe->has_gate_) {
    SY_ASSIGN_OR_RETURN(moe->gate_,
                        Linear::Create(backend, store, p + "gate", "", h, config.num_experts,
                                       weight_dtype, with_grad, layer));
  }
  if (moe->has_pregate_) {
    SY_ASSIGN_OR_RETURN(moe->pregate_,
                        Linear::Create(backend, store, p + "pregate", "", h, config.num_experts,
                                       weight_dtype, with_grad, layer));
  }
  if (moe->has_shared_) {
    SY_ASSIGN_OR_RETURN(moe->shared_, SharedExperts::Create(backend, store, config, layer,
                                                            weight_dtype, with_grad));
  }
  if (make_experts) {
    SY_ASSIGN_OR_RETURN(moe->experts_,
                        make_experts(backend, store, layer, weight_dtype, with_grad));
    SY_CHECK(moe->experts_ != nullptr) << "the expert compute factory returned null";
  } else {
    SY_ASSIGN_OR_RETURN(moe->experts_, LocalExpertCompute::Create(
                                           backend, store, layer, config.num_experts, h,
                                           config.moe_intermediate_size,
                                           ExpertMatrixDTypes::All(weight_dtype), with_grad));
  }
  Tensor expert_bias;
  if (config.router_scoring == RouterScoring::kSigmoid) {
    if (with_grad) {
      return UnimplementedError(
          "training with sigmoid routing (router_scoring: GLM-4.5, DeepSeek-V3) is not "
          "implemented yet; such a model runs for inference (generate, serve, perplexity)");
    }
    SY_ASSIGN_OR_RETURN(Parameter * bias,
                        store.Create(backend, p + "expert_bias", Shape{config.num_experts},
                                     DType::kF32, /*with_grad=*/false, layer, ParamInit::kZeros));
    expert_bias = bias->value;
  }
  moe->router_ = Router(RouterOptions{
      .num_experts = config.num_experts,
      .top_k = config.top_k,
      .norm_topk_prob = config.norm_topk_prob,
      .aux_loss_coef = static_cast<float>(config.router_aux_loss_coef),
      .z_loss_coef = static_cast<float>(config.router_z_loss_coef),
      .scoring = config.router_scoring,
      .num_groups = config.num_expert_groups,
      .topk_groups = config.topk_groups,
      .routed_scaling_factor = static_cast<float>(config.routed_scaling_factor),
      .expert_bias = expert_bias,
  });
  return moe;
}

Status MoeLayer::Forward(Backend& backend, const Tensor& h, const Tensor& routed_logits,
                         const Tensor& stats, const Tensor& out) {
  const int64_t n = h.dim(0);
  const int64_t hidden = h.dim(1);
  h_ = h;
  if (n == 0) return ForwardEmpty(backend, hidden, stats);
  if (has_gate_) {
    SY_ASSIGN_OR_RETURN(logits_, backend.Allocate(DType::kF32, Shape{n, num_experts_}));
    SY_RETURN_IF_ERROR(gate_.Forward(backend, h, logits_));
  } else {
    SY_CHECK(routed_logits.defined() && routed_logits.shape() == (Shape{n, num_experts_}))
        << "a pre-gated MoE layer needs the previous layer's pre-gate logits [N, E]";
    logits_ = routed_logits;
  }
  SY_RETURN_IF_ERROR(router_.Forward(backend, logits_, stats));
  plan_ = BuildDispatchPlan(router_.slot_experts(), n, top_k_, num_experts_, capacity_factor_);
  // The pre-gate runs before the experts so that the routing hook can fetch the next layer's
  // experts while this layer's experts run (Pre-gated MoE's overlap).
  if (has_pregate_) {
    SY_ASSIGN_OR_RETURN(pregate_logits_, backend.Allocate(DType::kF32, Shape{n, num_experts_}));
    SY_RETURN_IF_ERROR(pregate_.Forward(backend, h, pregate_logits_));
  }
  SY_RETURN_IF_ERROR(experts_->Routed(
      backend, ExpertRouting{.h = h,
                             .slot_experts = router_.slot_experts(),
                             .plan = &plan_,
                             .next_pregate_logits = has_pregate_ ? pregate_logits_ : Tensor()}));

  // N >= 1 and capacity >= 1, so at least one row survives.
  const int64_t r = plan_.num_rows();
  SY_RETURN_IF_ERROR(permutation_.Setup(backend, plan_));
  // The experts' rows take the dtype of the input (the model's compute dtype).
  SY_ASSIGN_OR_RETURN(xs_, backend.Allocate(h.dtype(), Shape{r, hidden}));
  permutation_.Permute(backend, h, xs_);
  SY_ASSIGN_OR_RETURN(ys_, backend.Allocate(h.dtype(), Shape{r, hidden}));
  SY_RETURN_IF_ERROR(experts_->Forward(backend, xs_, plan_.group_rows, ys_));
  SY_RETURN_IF_ERROR(permutation_.Unpermute(backend, ys_, router_.weights(), out));

  if (has_shared_) SY_RETURN_IF_ERROR(shared_.Forward(backend, h, out));
  return Status::Ok();
}

Status MoeLayer::Backward(Backend& backend, const Tensor& dout, const Tensor& d_pregate_logits,
                          const Tensor& dh) {
  SY_CHECK(h_.defined()) << "MoeLayer::Backward without a Forward";
  SY_CHECK(has_pregate_ == d_pregate_logits.defined())
      << "MoeLayer::Backward: d_pregate_logits must be given exactly when the layer has a "
         "pre-gate";
  const int64_t n = h_.dim(0);
  const int64_t r = plan_.num_rows();
  if (n == 0) {
    // No tokens here: still join the experts' collectives (expert parallelism).
    SY_RETURN_IF_ERROR(experts_->Backward(backend, ys_, xs_));
    if (!has_gate_) {
      SY_ASSIGN_OR_RETURN(d_routed_logits_, backend.Allocate(DType::kF32, Shape{0, num_experts_}));
    }
    return Status::Ok();
  }

  SY_ASSIGN_OR_RETURN(Tensor d_ys, backend.Allocate(ys_.dtype(), ys_.shape()));
  SY_ASSIGN_OR_RETURN(Tensor d_weights, backend.Allocate(DType::kF32, Shape{n, top_k_}));
  SY_RETURN_IF_ERROR(permutation_.UnpermuteBackward(backend, dout, d_ys, d_weights));
  SY_ASSIGN_OR_RETURN(Tensor d_xs, backend.Allocate(xs_.dtype(), Shape{r, h_.dim(1)}));
  SY_RETURN_IF_ERROR(experts_->Backward(backend, d_ys, d_xs));
  backend.Fill(dh, 0.0f);
  permutation_.PermuteBackward(backend, d_xs, dh);

  SY_ASSIGN_OR_RETURN(Tensor d_logits, backend.Allocate(DType::kF32, Shape{n, num_experts_}));
  SY_RETURN_IF_ERROR(router_.Backward(backend, d_weights, d_logits));
  if (has_gate_) {
    SY_RETURN_IF_ERROR(gate_.Backward(backend, h_, d_logits, dh, 1.0f));
    d_routed_logits_ = Tensor();
  } else {
    d_routed_logits_ = d_logits;
  }
  if (has_shared_) SY_RETURN_IF_ERROR(shared_.Backward(backend, dout, dh));
  if (has_pregate_) {
    SY_RETURN_IF_ERROR(pregate_.Backward(backend, h_, d_pregate_logits, dh, 1.0f));
  }
  return Status::Ok();
}

Status MoeLayer::ForwardEmpty(Backend& backend, int64_t hidden, const Tensor& stats) {
  plan_ = DispatchPlan{};
  plan_.top_k = top_k_;
  plan_.num_experts = num_experts_;
  plan_.routed.assign(num_experts_, 0);
  plan_.group_rows.assign(num_experts_, 0);
  if (stats.defined()) backend.Fill(stats, 0.0f);
  if (has_pregate_) {
    SY_ASSIGN_OR_RETURN(pregate_logits_, backend.Allocate(DType::kF32, Shape{0, num_experts_}));
  }
  SY_RETURN_IF_ERROR(experts_->Routed(
      backend, ExpertRouting{.h = h_,
                             .slot_experts = {},
                             .plan = &plan_,
                             .next_pregate_logits = has_pregate_ ? pregate_logits_ : Tensor()}));
  SY_ASSIGN_OR_RETURN(xs_, backend.Allocate(h_.dtype(), Shape{0, hidden}));
  SY_ASSIGN_OR_RETURN(ys_, backend.Allocate(h_.dtype(), Shape{0, hidden}));
  SY_RETURN_IF_ERROR(experts_->Forward(backend, xs_, plan_.group_rows, ys_));
  return Status::Ok();
}

void MoeLayer::Release() {
  router_.Release();
  permutation_.Release();
  experts_->Release();
  if (has_shared_) shared_.Release();
  h_ = logits_ = xs_ = ys_ = Tensor();
}

}  // namespace sy
