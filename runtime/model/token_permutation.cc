#include "runtime/model/token_permutation.h"

#include "runtime/core/check.h"
#include "runtime/model/host_transfer.h"

namespace sy {

Status TokenPermutation::Setup(Backend& backend, const DispatchPlan& plan) {
  const int64_t r = plan.num_rows();
  SY_CHECK_GT(r, 0) << "TokenPermutation of an empty plan";
  SY_ASSIGN_OR_RETURN(row_token_, UploadI32(backend, plan.row_token, Shape{r}));
  SY_ASSIGN_OR_RETURN(row_slot_, UploadI32(backend, plan.row_slot, Shape{r}));
  SY_ASSIGN_OR_RETURN(rows_, Iota(backend, r));
  return Status::Ok();
}

void TokenPermutation::Permute(Backend& backend, const Tensor& x, const Tensor& xs) const {
  backend.GatherRows(x, row_token_, xs);
}

void TokenPermutation::PermuteBackward(Backend& backend, const Tensor& d_xs,
                                       const Tensor& dx) const {
  backend.ScatterAddRows(d_xs, row_token_, Tensor(), dx);
}

Status TokenPermutation::Unpermute(Backend& backend, const Tensor& ys, const Tensor& weights,
                                   const Tensor& out) {
  const int64_t r = num_rows();
  SY_CHECK_EQ(ys.dim(0), r) << "Unpermute rows " << ys.ToString();
  SY_ASSIGN_OR_RETURN(row_weights_, backend.Allocate(DType::kF32, Shape{r}));
  backend.GatherRows(weights.Reshape({weights.numel(), 1}), row_slot_,
                     row_weights_.Reshape({r, 1}));
  backend.Fill(out, 0.0f);
  backend.ScatterAddRows(ys, row_token_, row_weights_, out);
  ys_ = ys;
  return Status::Ok();
}

Status TokenPermutation::UnpermuteBackward(Backend& backend, const Tensor& dout, const Tensor& d_ys,
                                           const Tensor& d_weights) {
  SY_CHECK(ys_.defined()) << "UnpermuteBackward without an Unpermute";
  const int64_t r = num_rows();
  const int64_t h = ys_.dim(1);
  // g[r] = dout[token of r]; d_ys[r] = w_r * g[r]; d_w[slot of r] = <g[r], ys[r]>.
  SY_ASSIGN_OR_RETURN(Tensor g, backend.Allocate(dout.dtype(), Shape{r, h}));
  backend.GatherRows(dout, row_token_, g);
  backend.Fill(d_ys, 0.0f);
  backend.ScatterAddRows(g, rows_, row_weights_, d_ys);  // a per-row scale

  SY_ASSIGN_OR_RETURN(Tensor prod, backend.Allocate(DType::kF32, Shape{r, h}));
  backend.Mul(g, ys_, prod);
  SY_ASSIGN_OR_RETURN(Tensor d_row_weights, backend.Allocate(DType::kF32, Shape{r, 1}));
  backend.Reduce(prod, d_row_weights.Reshape({r}), ReduceOp::kSum, ReduceAxis::kLast);
  backend.Fill(d_weights, 0.0f);
  backend.ScatterAddRows(d_row_weights, row_slot_, Tensor(),
                         d_weights.Reshape({d_weights.numel(), 1}));
  return Status::Ok();
}

void TokenPermutation::Release() { row_token_ = row_slot_ = rows_ = ys_ = row_weights_ = Tensor(); }

}  // namespace sy
