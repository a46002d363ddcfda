#include "runtime/model/swiglu_mlp.h"

#include "runtime/core/check.h"

namespace sy {

Result<SwigluMlp> SwigluMlp::Create(Backend& backend, ParameterStore& store,
                                    const std::string& prefix, int64_t hidden, int64_t intermediate,
                                    DType weight_dtype, bool with_grad, int layer) {
  SwigluMlp m;
  SY_ASSIGN_OR_RETURN(m.gate_, Linear::Create(backend, store, prefix + "w_gate", "", hidden,
                                              intermediate, weight_dtype, with_grad, layer));
  SY_ASSIGN_OR_RETURN(m.up_, Linear::Create(backend, store, prefix + "w_up", "", hidden,
                                            intermediate, weight_dtype, with_grad, layer));
  SY_ASSIGN_OR_RETURN(m.down_, Linear::Create(backend, store, prefix + "w_down", "", intermediate,
                                              hidden, weight_dtype, with_grad, layer));
  return m;
}

Status SwigluMlp::Forward(Backend& backend, const Tensor& x, const Tensor& y) {
  const int64_t n = x.dim(0);
  const int64_t inter = gate_.out_features();
  // The activations take the dtype of the input (the model's compute dtype).
  SY_ASSIGN_OR_RETURN(g_, backend.Allocate(x.dtype(), Shape{n, inter}));
  SY_ASSIGN_OR_RETURN(u_, backend.Allocate(x.dtype(), Shape{n, inter}));
  SY_ASSIGN_OR_RETURN(act_, backend.Allocate(x.dtype(), Shape{n, inter}));
  SY_RETURN_IF_ERROR(gate_.Forward(backend, x, g_));
  SY_RETURN_IF_ERROR(up_.Forward(backend, x, u_));
  backend.Swiglu(g_, u_, act_);
  SY_RETURN_IF_ERROR(down_.Forward(backend, act_, y));
  x_ = x;
  return Status::Ok();
}

Status SwigluMlp::Backward(Backend& backend, const Tensor& dy, const Tensor& dx, float dx_beta) {
  SY_CHECK(x_.defined()) << "SwigluMlp::Backward without a Forward";
  SY_ASSIGN_OR_RETURN(Tensor dact, backend.Allocate(act_.dtype(), act_.shape()));
  SY_RETURN_IF_ERROR(down_.Backward(backend, act_, dy, dact, 0.0f));
  SY_ASSIGN_OR_RETURN(Tensor dg, backend.Allocate(g_.dtype(), g_.shape()));
  SY_ASSIGN_OR_RETURN(Tensor du, backend.Allocate(u_.dtype(), u_.shape()));
  backend.SwigluBackward(g_, u_, dact, dg, du);
  SY_RETURN_IF_ERROR(gate_.Backward(backend, x_, dg, dx, dx_beta));
  SY_RETURN_IF_ERROR(up_.Backward(backend, x_, du, dx, 1.0f));
  return Status::Ok();
}

void SwigluMlp::Release() { x_ = g_ = u_ = act_ = Tensor(); }

}  // namespace sy
