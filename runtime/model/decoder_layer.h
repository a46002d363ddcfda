// DecoderLayer: one pre-norm transformer block with an MoE or a dense FFN, and its backward.
//
//   x2  = x + Attention(RmsNorm_input(x))
//   out = x2 + FFN(RmsNorm_post_attention(x2))      FFN = MoeLayer or SwigluMlp
//
// Precision (Note [mixed precision] in runtime/model/moe_model.h): the residual stream x, x2 and
// out, and the gradients that flow along it, are f32; with set_compute_dtype(bf16 or f16) the
// normalised inputs of the attention and the FFN, and everything inside them, are in that dtype.
// The backward rounds the residual gradient to it once per branch, as autocast does.
//
// Recomputation: with set_recompute(true) the layer releases its activations at the end of
// Forward. Backward then runs Forward again from the same input (the model keeps each layer's
// input, and the routed logits of a pre-gated layer) before differentiating. Routing is
// deterministic, so the recomputed activations are identical.
//
// Ownership: owns its sub-layers; parameters live in the ParameterStore. Thread-safety: as the
// Backend's operators.
#pragma once

#include <memory>

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/model/attention_block.h"
#include "runtime/model/model_config.h"
#include "runtime/model/moe_layer.h"
#include "runtime/model/parameter_store.h"
#include "runtime/model/rms_norm_layer.h"
#include "runtime/model/swiglu_mlp.h"

namespace sy {

class DecoderLayer {
 public:
  // `make_experts`: passed to MoeLayer::Create for an MoE layer (empty: LocalExpertCompute).
  static Result<std::unique_ptr<DecoderLayer>> Create(
      Backend& backend, ParameterStore& store, const ModelConfig& config, int layer,
      DType weight_dtype, bool with_grad, const ExpertComputeFactory& make_experts = {});

  // x [N, H] -> out [N, H]. routed_logits and stats: see MoeLayer::Forward (ignored by a dense
  // layer). x and routed_logits must stay unchanged until Backward when recomputing.
  Status Forward(Backend& backend, const TokenBatch& batch, const Tensor& x,
                 const Tensor& routed_logits, const Tensor& stats, const Tensor& out);
  // dout [N, H] -> dx [N, H] (overwritten). d_pregate_logits: see MoeLayer::Backward.
  Status Backward(Backend& backend, const TokenBatch& batch, const Tensor& dout,
                  const Tensor& d_pregate_logits, const Tensor& dx);
  void Release();

  void set_recompute(bool recompute) { recompute_ = recompute; }
  bool recompute() const { return recompute_; }
  // The dtype of the branches' activations: f32 (the default), bf16 or f16.
  void set_compute_dtype(DType dtype) { compute_dtype_ = dtype; }
  // nullptr for a dense layer.
  MoeLayer* moe() { return moe_.get(); }
  const MoeLayer* moe() const { return moe_.get(); }

 private:
  DecoderLayer() = default;
  Status ForwardImpl(Backend& backend, const TokenBatch& batch, const Tensor& x,
                     const Tensor& routed_logits, const Tensor& stats, const Tensor& out);
  // `t` itself when it is in the compute dtype, else a copy rounded to it.
  Result<Tensor> InComputeDType(Backend& backend, const Tensor& t) const;

  RmsNormLayer input_norm_, post_norm_;
  AttentionBlock attention_;
  std::unique_ptr<MoeLayer> moe_;
  SwigluMlp mlp_;
  bool recompute_ = false;
  DType compute_dtype_ = DType::kF32;

  // Inputs, kept for recomputation.
  Tensor x_, routed_logits_, stats_;
  // Activations.
  Tensor x2_;
};

}  // namespace sy
