#include "runtime/model/expert_compute.h"

#include <numeric>
#include <string>

#include "runtime/core/check.h"

namespace sy {

std::string ExpertParameterName(int layer, int expert, std::string_view weight) {
  return "experts/layer" + std::to_string(layer) + "/expert" + std::to_string(expert) + "/" +
         std::string(weight);
}

std::unique_ptr<LocalExpertCompute> LocalExpertCompute::CreateBound(int layer, int num_experts,
                                                                    int first_expert) {
  SY_CHECK_GE(first_expert, 0) << "first_expert";
  std::unique_ptr<LocalExpertCompute> ec(new LocalExpertCompute());
  ec->layer_ = layer;
  ec->first_expert_ = first_expert;
  ec->num_experts_ = num_experts;
  ec->bound_ = true;
  return ec;
}

void LocalExpertCompute::set_weight_source(ExpertWeightSource* source) {
  SY_CHECK(bound_) << "layer " << layer_
                   << ": a weight source for experts with weights of their own";
  source_ = source;
}

Result<std::unique_ptr<LocalExpertCompute>> LocalExpertCompute::Create(
    Backend& backend, ParameterStore& store, int layer, int num_experts, int64_t hidden,
    int64_t intermediate, ExpertMatrixDTypes weight_dtypes, bool with_grad, int first_expert) {
  SY_CHECK_GE(first_expert, 0) << "first_expert";
  std::unique_ptr<LocalExpertCompute> ec(new LocalExpertCompute());
  ec->layer_ = layer;
  ec->first_expert_ = first_expert;
  ec->num_experts_ = num_experts;
  const int64_t e = num_experts;
  SY_ASSIGN_OR_RETURN(ec->w_gate_,
                      backend.Allocate(weight_dtypes.gate, Shape{e, intermediate, hidden}));
  SY_ASSIGN_OR_RETURN(ec->w_up_,
                      backend.Allocate(weight_dtypes.up, Shape{e, intermediate, hidden}));
  SY_ASSIGN_OR_RETURN(ec->w_down_,
                      backend.Allocate(weight_dtypes.down, Shape{e, hidden, intermediate}));
  if (with_grad) {
    SY_ASSIGN_OR_RETURN(ec->dw_gate_,
                        backend.Allocate(DType::kF32, Shape{e, intermediate, hidden}));
    SY_ASSIGN_OR_RETURN(ec->dw_up_, backend.Allocate(DType::kF32, Shape{e, intermediate, hidden}));
    SY_ASSIGN_OR_RETURN(ec->dw_down_,
                        backend.Allocate(DType::kF32, Shape{e, hidden, intermediate}));
  }
  for (int i = 0; i < num_experts; ++i) {
    const std::pair<const char*, std::pair<Tensor*, Tensor*>> weights[] = {
        {"w_gate", {&ec->w_gate_, &ec->dw_gate_}},
        {"w_up", {&ec->w_up_, &ec->dw_up_}},
        {"w_down", {&ec->w_down_, &ec->dw_down_}},
    };
    for (const auto& [name, tensors] : weights) {
      Parameter p;
      p.name = ExpertParameterName(layer, first_expert + i, name);
      p.value = tensors.first->Select(i);
      if (with_grad) p.grad = tensors.second->Select(i);
      p.is_expert = true;
      p.layer = layer;
      p.expert = first_expert + i;
      p.init = ParamInit::kNormal;
      store.Add(std::move(p));
    }
  }
  return ec;
}

Status LocalExpertCompute::Forward(Backend& backend, const Tensor& xs,
                                   std::span<const int64_t> group_rows, const Tensor& ys) {
  SY_CHECK_EQ(static_cast<int64_t>(group_rows.size()), num_experts_) << "group count";
  SY_CHECK_EQ(std::accumulate(group_rows.begin(), group_rows.end(), int64_t{0}), xs.dim(0))
      << "group rows do not add up to the rows of " << xs.ToString();
  if (before_forward_) SY_RETURN_IF_ERROR(before_forward_(layer_, first_expert_, group_rows));
  if (bound_) {
    if (source_ == nullptr) {
      return FailedPreconditionError("decoder layer " + std::to_string(layer_) +
                                     ": its experts are bound per step and no weight source is "
                                     "set (LocalExpertCompute::set_weight_source)");
    }
    SY_ASSIGN_OR_RETURN(cur_, source_->Bind(layer_, first_expert_, group_rows));
    SY_CHECK_EQ(static_cast<int64_t>(cur_.group_rows.size()), cur_.w_gate.dim(0))
        << "bound experts of layer " << layer_;
  } else {
    cur_ = BoundExperts{w_gate_,
                        w_up_,
                        w_down_,
                        dw_gate_,
                        dw_up_,
                        dw_down_,
                        std::vector<int64_t>(group_rows.begin(), group_rows.end())};
  }
  const int64_t r = xs.dim(0);
  const int64_t inter = cur_.w_gate.dim(1);
  // The activations take the dtype of the rows (the model's compute dtype).
  SY_ASSIGN_OR_RETURN(g_, backend.Allocate(xs.dtype(), Shape{r, inter}));
  SY_ASSIGN_OR_RETURN(u_, backend.Allocate(xs.dtype(), Shape{r, inter}));
  SY_ASSIGN_OR_RETURN(act_, backend.Allocate(xs.dtype(), Shape{r, inter}));
  if (cur_.w_gate.dtype() == cur_.w_up.dtype()) {
    const Tensor weights[] = {cur_.w_gate, cur_.w_up};
    const Tensor outputs[] = {g_, u_};
    backend.GroupedGemmShared(xs, weights, outputs, cur_.group_rows, GemmOptions{.trans_b = true});
  } else {  // ExpertMatrixDTypes with gate and up in different dtypes
    backend.GroupedGemm(xs, cur_.w_gate, g_, cur_.group_rows, GemmOptions{.trans_b = true});
    backend.GroupedGemm(xs, cur_.w_up, u_, cur_.group_rows, GemmOptions{.trans_b = true});
  }
  backend.Swiglu(g_, u_, act_);
  backend.GroupedGemm(act_, cur_.w_down, ys, cur_.group_rows, GemmOptions{.trans_b = true});
  xs_ = xs;
  return Status::Ok();
}

Status LocalExpertCompute::Backward(Backend& backend, const Tensor& d_ys, const Tensor& d_xs) {
  SY_CHECK(xs_.defined()) << "LocalExpertCompute::Backward without a Forward";
  SY_CHECK(cur_.dw_gate.defined()) << "LocalExpertCompute::Backward on forward-only experts";
  const std::vector<int64_t>& rows = cur_.group_rows;
  // w_down [E, H, I] read as [G, K=H, N=I]: d_act = d_ys W_down.
  SY_ASSIGN_OR_RETURN(Tensor dact, backend.Allocate(act_.dtype(), act_.shape()));
  backend.GroupedGemm(d_ys, cur_.w_down, dact, rows, GemmOptions{});
  backend.GroupedGemmWeightGrad(act_, d_ys, cur_.dw_down, rows, 1.0f);
  SY_ASSIGN_OR_RETURN(Tensor dg, backend.Allocate(g_.dtype(), g_.shape()));
  SY_ASSIGN_OR_RETURN(Tensor du, backend.Allocate(u_.dtype(), u_.shape()));
  backend.SwigluBackward(g_, u_, dact, dg, du);
  backend.GroupedGemmWeightGrad(xs_, dg, cur_.dw_gate, rows, 1.0f);
  backend.GroupedGemmWeightGrad(xs_, du, cur_.dw_up, rows, 1.0f);
  // d_xs sums two products: in f32, rounded once to a 16-bit d_xs.
  Tensor sum = d_xs;
  if (d_xs.dtype() != DType::kF32) {
    SY_ASSIGN_OR_RETURN(sum, backend.Allocate(DType::kF32, d_xs.shape()));
  }
  backend.GroupedGemm(dg, cur_.w_gate, sum, rows, GemmOptions{});
  backend.GroupedGemm(du, cur_.w_up, sum, rows, GemmOptions{.beta = 1.0f});
  if (sum.data() != d_xs.data()) backend.Convert(sum, d_xs);
  return Status::Ok();
}

void LocalExpertCompute::Release() {
  xs_ = g_ = u_ = act_ = Tensor();
  cur_ = BoundExperts{};
}

Status AbsentExpertCompute::Missing() const {
  return FailedPreconditionError(
      "decoder layer " + std::to_string(layer_) +
      " was built without its routed experts (they were kept on the host, not on the device); "
      "install an expert provider that fetches them (a policy other than resident)");
}

Status AbsentExpertCompute::Forward(Backend& backend, const Tensor& xs,
                                    std::span<const int64_t> group_rows, const Tensor& ys) {
  (void)backend;
  (void)xs;
  (void)ys;
  for (const int64_t rows : group_rows) {
    if (rows > 0) return Missing();
  }
  return Status::Ok();
}

Status AbsentExpertCompute::Backward(Backend& backend, const Tensor& d_ys, const Tensor& d_xs) {
  (void)backend;
  (void)d_ys;
  (void)d_xs;
  return Missing();
}

}  // namespace sy
