#include "runtime/model/linear.h"

#include <utility>

#include "runtime/core/check.h"

namespace sy {

Result<Linear> Linear::Create(Backend& backend, ParameterStore& store,
                              const std::string& weight_name, const std::string& bias_name,
                              int64_t in_features, int64_t out_features, DType weight_dtype,
                              bool with_grad, int layer) {
  SY_ASSIGN_OR_RETURN(Parameter * w,
                      store.Create(backend, weight_name, Shape{out_features, in_features},
                                   weight_dtype, with_grad, layer, ParamInit::kNormal));
  Tensor b, db;
  if (!bias_name.empty()) {
    SY_ASSIGN_OR_RETURN(Parameter * bias,
                        store.Create(backend, bias_name, Shape{out_features}, DType::kF32,
                                     with_grad, layer, ParamInit::kZeros));
    b = bias->value;
    db = bias->grad;
  }
  return Linear(w->value, w->grad, b, db);
}

Linear::Linear(Tensor w, Tensor dw, Tensor b, Tensor db)
    : w_(std::move(w)), dw_(std::move(dw)), b_(std::move(b)), db_(std::move(db)) {
  SY_CHECK_EQ(w_.rank(), 2) << "Linear weight " << w_.ToString();
  SY_CHECK(!b_.defined() || b_.shape() == Shape{w_.dim(0)})
      << "Linear bias " << b_.ToString() << " for weight " << w_.ToString();
}

Status Linear::Forward(Backend& backend, const Tensor& x, const Tensor& y) const {
  SY_CHECK(x.rank() == 2 && x.dim(1) == in_features()) << "Linear input " << x.ToString();
  SY_CHECK(y.rank() == 2 && y.dim(0) == x.dim(0) && y.dim(1) == out_features())
      << "Linear output " << y.ToString();
  if (!b_.defined()) {
    backend.Gemm(x, w_, y, GemmOptions{.trans_b = true});
    return Status::Ok();
  }
  // The contract does not promise that AddBias may write over its input, so go through a temp.
  SY_ASSIGN_OR_RETURN(Tensor tmp, backend.Allocate(y.dtype(), y.shape()));
  backend.Gemm(x, w_, tmp, GemmOptions{.trans_b = true});
  backend.AddBias(tmp, b_, y);
  return Status::Ok();
}

Status Linear::Backward(Backend& backend, const Tensor& x, const Tensor& dy, const Tensor& dx,
                        float dx_beta) const {
  SY_CHECK(dy.rank() == 2 && dy.dim(0) == x.dim(0) && dy.dim(1) == out_features())
      << "Linear dy " << dy.ToString() << " for x " << x.ToString();
  SY_CHECK(dw_.defined()) << "Linear::Backward on a forward-only weight " << w_.ToString();
  if (dx.defined()) {
    backend.Gemm(dy, w_, dx, GemmOptions{.beta = dx_beta});
  }
  backend.Gemm(dy, x, dw_, GemmOptions{.trans_a = true, .beta = 1.0f});
  if (b_.defined()) {
    SY_ASSIGN_OR_RETURN(Tensor db, backend.Allocate(DType::kF32, b_.shape()));
    backend.Reduce(dy, db, ReduceOp::kSum, ReduceAxis::kFirst);
    backend.Axpy(1.0f, db, db_);
  }
  return Status::Ok();
}

}  // namespace sy
