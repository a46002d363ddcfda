#include "runtime/model/rms_norm_layer.h"

#include "runtime/core/check.h"

namespace sy {

Result<RmsNormLayer> RmsNormLayer::Create(Backend& backend, ParameterStore& store,
                                          const std::string& name, int64_t dim, DType weight_dtype,
                                          bool with_grad, int layer, float eps) {
  SY_ASSIGN_OR_RETURN(Parameter * p, store.Create(backend, name, Shape{dim}, weight_dtype,
                                                  with_grad, layer, ParamInit::kOnes));
  RmsNormLayer norm;
  norm.w_ = p->value;
  norm.dw_ = p->grad;
  norm.eps_ = eps;
  return norm;
}

Status RmsNormLayer::Forward(Backend& backend, const Tensor& x, const Tensor& out) {
  SY_CHECK(x.rank() == 2 && x.dim(1) == w_.dim(0)) << "RmsNormLayer input " << x.ToString();
  SY_ASSIGN_OR_RETURN(rstd_, backend.Allocate(DType::kF32, Shape{x.dim(0)}));
  backend.RmsNorm(x, w_, eps_, out, rstd_);
  x_ = x;
  return Status::Ok();
}

Status RmsNormLayer::Backward(Backend& backend, const Tensor& dout, const Tensor& dx) {
  SY_CHECK(x_.defined() && rstd_.defined()) << "RmsNormLayer::Backward without a Forward";
  SY_CHECK(dw_.defined()) << "RmsNormLayer::Backward on a forward-only weight";
  // RmsNormBackward overwrites dweight; parameter gradients accumulate, so go through a temp.
  SY_ASSIGN_OR_RETURN(Tensor dw, backend.Allocate(DType::kF32, dw_.shape()));
  backend.RmsNormBackward(x_, w_, rstd_, dout, dx, dw);
  backend.Axpy(1.0f, dw, dw_);
  return Status::Ok();
}

void RmsNormLayer::Release() {
  x_ = Tensor();
  rstd_ = Tensor();
}

}  // namespace sy
