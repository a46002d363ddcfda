#include "inference/offload/swiglu_expert.h"

#include "runtime/core/check.h"

namespace sy::offload {

Status RunSwigluExpert(Backend& backend, const Tensor& w_gate, const Tensor& w_up,
                       const Tensor& w_down, const Tensor& x, const Tensor& y) {
  SY_CHECK(x.rank() == 2 && y.shape() == x.shape())
      << "RunSwigluExpert: x " << x.ToString() << ", y " << y.ToString();
  const int64_t rows = x.dim(0);
  const int64_t inter = w_gate.dim(0);
  if (rows == 0) return Status::Ok();
  SY_ASSIGN_OR_RETURN(Tensor g, backend.Allocate(DType::kF32, Shape{rows, inter}));
  SY_ASSIGN_OR_RETURN(Tensor u, backend.Allocate(DType::kF32, Shape{rows, inter}));
  backend.Gemm(x, w_gate, g, GemmOptions{.trans_b = true});
  backend.Gemm(x, w_up, u, GemmOptions{.trans_b = true});
  SY_ASSIGN_OR_RETURN(Tensor act, backend.Allocate(DType::kF32, Shape{rows, inter}));
  backend.Swiglu(g, u, act);
  backend.Gemm(act, w_down, y, GemmOptions{.trans_b = true});
  return Status::Ok();
}

}  // namespace sy::offload
