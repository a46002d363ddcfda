#include "runtime/model/decoder_layer.h"

#include <string>

#include "runtime/core/check.h"

namespace sy {

Result<std::unique_ptr<DecoderLayer>> DecoderLayer::Create(
    Backend& backend, ParameterStore& store, const ModelConfig& config, int layer,
    DType weight_dtype, bool with_grad, const ExpertComputeFactory& make_experts) {
  std::unique_ptr<DecoderLayer> d(new DecoderLayer());
  const std::string p = "layers/" + std::to_string(layer) + "/";
  const float eps = static_cast<float>(config.rms_norm_eps);
  SY_ASSIGN_OR_RETURN(d->input_norm_,
                      RmsNormLayer::Create(backend, store, p + "input_norm", config.hidden_size,
                                           weight_dtype, with_grad, layer, eps));
  SY_ASSIGN_OR_RETURN(d->attention_, AttentionBlock::Create(backend, store, config, layer,
                                                            weight_dtype, with_grad));
  SY_ASSIGN_OR_RETURN(
      d->post_norm_, RmsNormLayer::Create(backend, store, p + "post_attention_norm",
                                          config.hidden_size, weight_dtype, with_grad, layer, eps));
  if (config.IsMoeLayer(layer)) {
    SY_ASSIGN_OR_RETURN(d->moe_, MoeLayer::Create(backend, store, config, layer, weight_dtype,
                                                  with_grad, make_experts));
  } else {
    SY_ASSIGN_OR_RETURN(
        d->mlp_, SwigluMlp::Create(backend, store, p + "mlp/", config.hidden_size,
                                   config.intermediate_size, weight_dtype, with_grad, layer));
  }
  d->recompute_ = config.recompute;
  return d;
}

Status DecoderLayer::Forward(Backend& backend, const TokenBatch& batch, const Tensor& x,
                             const Tensor& routed_logits, const Tensor& stats, const Tensor& out) {
  x_ = x;
  routed_logits_ = routed_logits;
  stats_ = stats;
  SY_RETURN_IF_ERROR(ForwardImpl(backend, batch, x, routed_logits, stats, out));
  if (recompute_) {
    // Keep the inputs (and the pre-gate output, which the next MoE layer has already taken).
    input_norm_.Release();
    attention_.Release();
    post_norm_.Release();
    if (moe_) moe_->Release();
    mlp_.Release();
    x2_ = Tensor();
  }
  return Status::Ok();
}

Status DecoderLayer::ForwardImpl(Backend& backend, const TokenBatch& batch, const Tensor& x,
                                 const Tensor& routed_logits, const Tensor& stats,
                                 const Tensor& out) {
  const Shape shape = x.shape();
  SY_ASSIGN_OR_RETURN(Tensor h1, backend.Allocate(compute_dtype_, shape));
  SY_RETURN_IF_ERROR(input_norm_.Forward(backend, x, h1));
  SY_ASSIGN_OR_RETURN(Tensor a, backend.Allocate(DType::kF32, shape));
  SY_RETURN_IF_ERROR(attention_.Forward(backend, batch, h1, a));
  SY_ASSIGN_OR_RETURN(x2_, backend.Allocate(DType::kF32, shape));
  backend.Add(x, a, x2_);
  SY_ASSIGN_OR_RETURN(Tensor h2, backend.Allocate(compute_dtype_, shape));
  SY_RETURN_IF_ERROR(post_norm_.Forward(backend, x2_, h2));
  SY_ASSIGN_OR_RETURN(Tensor f, backend.Allocate(DType::kF32, shape));
  if (moe_) {
    SY_RETURN_IF_ERROR(moe_->Forward(backend, h2, routed_logits, stats, f));
  } else {
    SY_RETURN_IF_ERROR(mlp_.Forward(backend, h2, f));
  }
  backend.Add(x2_, f, out);
  return Status::Ok();
}

Status DecoderLayer::Backward(Backend& backend, const TokenBatch& batch, const Tensor& dout,
                              const Tensor& d_pregate_logits, const Tensor& dx) {
  SY_CHECK(x_.defined()) << "DecoderLayer::Backward without a Forward";
  const Shape shape = x_.shape();
  if (recompute_) {
    SY_ASSIGN_OR_RETURN(Tensor out, backend.Allocate(DType::kF32, shape));
    SY_RETURN_IF_ERROR(ForwardImpl(backend, batch, x_, routed_logits_, stats_, out));
  }
  SY_ASSIGN_OR_RETURN(Tensor dh2, backend.Allocate(DType::kF32, shape));
  SY_ASSIGN_OR_RETURN(const Tensor dout_branch, InComputeDType(backend, dout));
  if (moe_) {
    SY_RETURN_IF_ERROR(moe_->Backward(backend, dout_branch, d_pregate_logits, dh2));
  } else {
    SY_RETURN_IF_ERROR(mlp_.Backward(backend, dout_branch, dh2, 0.0f));
  }
  SY_ASSIGN_OR_RETURN(Tensor dx2_norm, backend.Allocate(DType::kF32, shape));
  SY_RETURN_IF_ERROR(post_norm_.Backward(backend, dh2, dx2_norm));
  SY_ASSIGN_OR_RETURN(Tensor dx2, backend.Allocate(DType::kF32, shape));
  backend.Add(dout, dx2_norm, dx2);

  SY_ASSIGN_OR_RETURN(Tensor dh1, backend.Allocate(DType::kF32, shape));
  SY_ASSIGN_OR_RETURN(const Tensor dx2_branch, InComputeDType(backend, dx2));
  SY_RETURN_IF_ERROR(attention_.Backward(backend, batch, dx2_branch, dh1));
  SY_ASSIGN_OR_RETURN(Tensor dx_norm, backend.Allocate(DType::kF32, shape));
  SY_RETURN_IF_ERROR(input_norm_.Backward(backend, dh1, dx_norm));
  backend.Add(dx2, dx_norm, dx);
  return Status::Ok();
}

Result<Tensor> DecoderLayer::InComputeDType(Backend& backend, const Tensor& t) const {
  if (t.dtype() == compute_dtype_) return t;
  SY_ASSIGN_OR_RETURN(Tensor rounded, backend.Allocate(compute_dtype_, t.shape()));
  backend.Convert(t, rounded);
  return rounded;
}

void DecoderLayer::Release() {
  input_norm_.Release();
  attention_.Release();
  post_norm_.Release();
  if (moe_) moe_->Release();
  mlp_.Release();
  x_ = routed_logits_ = stats_ = x2_ = Tensor();
}

}  // namespace sy
