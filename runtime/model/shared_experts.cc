#include "runtime/model/shared_experts.h"

#include <string>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/model/host_transfer.h"

namespace sy {

Result<SharedExperts> SharedExperts::Create(Backend& backend, ParameterStore& store,
                                            const ModelConfig& config, int layer,
                                            DType weight_dtype, bool with_grad) {
  SharedExperts s;
  const std::string p = "layers/" + std::to_string(layer) + "/moe/";
  SY_ASSIGN_OR_RETURN(
      s.mlp_, SwigluMlp::Create(backend, store, p + "shared_experts/", config.hidden_size,
                                config.shared_intermediate(), weight_dtype, with_grad, layer));
  s.gated_ = config.shared_expert_gate;
  if (s.gated_) {
    SY_ASSIGN_OR_RETURN(
        s.gate_, Linear::Create(backend, store, p + "shared_expert_gate", "", config.hidden_size, 1,
                                weight_dtype, with_grad, layer));
  }
  return s;
}

Status SharedExperts::Forward(Backend& backend, const Tensor& h, const Tensor& out) {
  const int64_t n = h.dim(0);
  // In the dtype of the sum it is added to (f32 under mixed precision).
  SY_ASSIGN_OR_RETURN(s_, backend.Allocate(out.dtype(), h.shape()));
  SY_RETURN_IF_ERROR(mlp_.Forward(backend, h, s_));
  h_ = h;
  if (!gated_) {
    backend.Axpy(1.0f, s_, out);
    return Status::Ok();
  }
  // pair[n] = [h_n . w, 0]; sigmoid(h_n . w) = softmax(pair[n])[0].
  SY_ASSIGN_OR_RETURN(Tensor a, backend.Allocate(DType::kF32, Shape{n, 1}));
  SY_RETURN_IF_ERROR(gate_.Forward(backend, h, a));
  std::vector<int32_t> even(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) even[static_cast<size_t>(i)] = static_cast<int32_t>(2 * i);
  SY_ASSIGN_OR_RETURN(even_, UploadI32(backend, even, Shape{n}));
  SY_ASSIGN_OR_RETURN(rows_, Iota(backend, n));
  SY_ASSIGN_OR_RETURN(Tensor pair, Zeros(backend, Shape{n, 2}));
  backend.ScatterAddRows(a, even_, Tensor(), pair.Reshape({2 * n, 1}));
  SY_ASSIGN_OR_RETURN(pair_probs_, backend.Allocate(DType::kF32, Shape{n, 2}));
  backend.Softmax(pair, pair_probs_);
  SY_ASSIGN_OR_RETURN(sig_, backend.Allocate(DType::kF32, Shape{n}));
  backend.GatherRows(pair_probs_.Reshape({2 * n, 1}), even_, sig_.Reshape({n, 1}));
  backend.ScatterAddRows(s_, rows_, sig_, out);  // out[n] += sig_n * s_n
  return Status::Ok();
}

Status SharedExperts::Backward(Backend& backend, const Tensor& dout, const Tensor& dh) {
  SY_CHECK(h_.defined()) << "SharedExperts::Backward without a Forward";
  if (!gated_) return mlp_.Backward(backend, dout, dh, 1.0f);
  const int64_t n = h_.dim(0);
  // d s_n = sig_n * dout_n; d sig_n = <dout_n, s_n>.
  SY_ASSIGN_OR_RETURN(Tensor ds, Zeros(backend, dout.shape()));
  backend.ScatterAddRows(dout, rows_, sig_, ds);
  SY_ASSIGN_OR_RETURN(Tensor prod, backend.Allocate(DType::kF32, dout.shape()));
  backend.Mul(dout, s_, prod);
  SY_ASSIGN_OR_RETURN(Tensor dsig, backend.Allocate(DType::kF32, Shape{n, 1}));
  backend.Reduce(prod, dsig.Reshape({n}), ReduceOp::kSum, ReduceAxis::kLast);
  SY_ASSIGN_OR_RETURN(Tensor dpair_probs, Zeros(backend, Shape{n, 2}));
  backend.ScatterAddRows(dsig, even_, Tensor(), dpair_probs.Reshape({2 * n, 1}));
  SY_ASSIGN_OR_RETURN(Tensor dpair, backend.Allocate(DType::kF32, Shape{n, 2}));
  backend.SoftmaxBackward(pair_probs_, dpair_probs, dpair);
  SY_ASSIGN_OR_RETURN(Tensor da, backend.Allocate(DType::kF32, Shape{n, 1}));
  backend.GatherRows(dpair.Reshape({2 * n, 1}), even_, da);
  SY_RETURN_IF_ERROR(gate_.Backward(backend, h_, da, dh, 1.0f));
  return mlp_.Backward(backend, ds, dh, 1.0f);
}

void SharedExperts::Release() {
  mlp_.Release();
  h_ = s_ = pair_probs_ = sig_ = even_ = rows_ = Tensor();
}

}  // namespace sy
