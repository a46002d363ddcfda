#include "runtime/model/attention_block.h"

#include <cmath>
#include <string>

#include "runtime/core/check.h"
#include "runtime/model/kv_cache.h"

namespace sy {

Result<AttentionBlock> AttentionBlock::Create(Backend& backend, ParameterStore& store,
                                              const ModelConfig& config, int layer,
                                              DType weight_dtype, bool with_grad) {
  AttentionBlock a;
  a.layer_ = layer;
  a.num_heads_ = config.num_heads;
  a.num_kv_heads_ = config.kv_heads();
  a.head_dim_ = config.dim_per_head();
  a.rope_ = RopeOptions{static_cast<float>(config.rope_theta), config.rotary_dim};
  a.qk_norm_ = config.qk_norm;
  a.qk_norm_per_head_ = config.qk_norm_per_head;
  const std::string p = "layers/" + std::to_string(layer) + "/attn/";
  const int64_t h = config.hidden_size;
  const int64_t q_out = a.num_heads_ * a.head_dim_;
  const int64_t kv_out = a.num_kv_heads_ * a.head_dim_;
  const bool bias = config.attention_bias;
  SY_ASSIGN_OR_RETURN(a.wq_, Linear::Create(backend, store, p + "wq", bias ? p + "bq" : "", h,
                                            q_out, weight_dtype, with_grad, layer));
  SY_ASSIGN_OR_RETURN(a.wk_, Linear::Create(backend, store, p + "wk", bias ? p + "bk" : "", h,
                                            kv_out, weight_dtype, with_grad, layer));
  SY_ASSIGN_OR_RETURN(a.wv_, Linear::Create(backend, store, p + "wv", bias ? p + "bv" : "", h,
                                            kv_out, weight_dtype, with_grad, layer));
  SY_ASSIGN_OR_RETURN(
      a.wo_, Linear::Create(backend, store, p + "wo", config.attention_out_bias ? p + "bo" : "",
                            q_out, h, weight_dtype, with_grad, layer));
  if (a.qk_norm_) {
    const float eps = static_cast<float>(config.rms_norm_eps);
    SY_ASSIGN_OR_RETURN(a.q_norm_, RmsNormLayer::Create(backend, store, p + "q_norm",
                                                        a.qk_norm_per_head_ ? a.head_dim_ : q_out,
                                                        weight_dtype, with_grad, layer, eps));
    SY_ASSIGN_OR_RETURN(a.k_norm_, RmsNormLayer::Create(backend, store, p + "k_norm",
                                                        a.qk_norm_per_head_ ? a.head_dim_ : kv_out,
                                                        weight_dtype, with_grad, layer, eps));
  }
  return a;
}

AttentionOptions AttentionBlock::Options() const {
  AttentionOptions options;
  options.scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
  return options;
}

Status AttentionBlock::NormRope(Backend& backend, const TokenBatch& batch, RmsNormLayer* norm,
                                int heads, const Tensor& raw, const Tensor& rot) {
  const int64_t n = raw.dim(0);
  Tensor to_rotate = raw;
  if (qk_norm_) {
    SY_ASSIGN_OR_RETURN(Tensor normed, backend.Allocate(raw.dtype(), raw.shape()));
    Shape rows = qk_norm_per_head_ ? Shape{n * heads, head_dim_} : raw.shape();
    SY_RETURN_IF_ERROR(norm->Forward(backend, raw.Reshape(rows), normed.Reshape(rows)));
    to_rotate = normed;
  }
  Shape thd{n, heads, head_dim_};
  backend.Rope(to_rotate.Reshape(thd), batch.positions, rope_, rot.Reshape(thd));
  return Status::Ok();
}

Status AttentionBlock::NormRopeBackward(Backend& backend, const TokenBatch& batch,
                                        RmsNormLayer* norm, int heads, const Tensor& drot,
                                        const Tensor& draw) {
  const int64_t n = drot.dim(0);
  Shape thd{n, heads, head_dim_};
  if (!qk_norm_) {
    backend.RopeBackward(drot.Reshape(thd), batch.positions, rope_, draw.Reshape(thd));
    return Status::Ok();
  }
  SY_ASSIGN_OR_RETURN(Tensor dnormed, backend.Allocate(drot.dtype(), drot.shape()));
  backend.RopeBackward(drot.Reshape(thd), batch.positions, rope_, dnormed.Reshape(thd));
  Shape rows = qk_norm_per_head_ ? Shape{n * heads, head_dim_} : drot.shape();
  return norm->Backward(backend, dnormed.Reshape(rows), draw.Reshape(rows));
}

Status AttentionBlock::Forward(Backend& backend, const TokenBatch& batch, const Tensor& x,
                               const Tensor& y) {
  const int64_t n = x.dim(0);
  SY_CHECK_EQ(n, batch.num_tokens()) << "AttentionBlock input " << x.ToString();
  const int64_t q_out = num_heads_ * head_dim_;
  const int64_t kv_out = num_kv_heads_ * head_dim_;
  // The activations take the dtype of the input (the model's compute dtype).
  const DType act = x.dtype();
  SY_ASSIGN_OR_RETURN(q_raw_, backend.Allocate(act, Shape{n, q_out}));
  SY_ASSIGN_OR_RETURN(k_raw_, backend.Allocate(act, Shape{n, kv_out}));
  SY_ASSIGN_OR_RETURN(v_, backend.Allocate(act, Shape{n, kv_out}));
  SY_RETURN_IF_ERROR(wq_.Forward(backend, x, q_raw_));
  SY_RETURN_IF_ERROR(wk_.Forward(backend, x, k_raw_));
  SY_RETURN_IF_ERROR(wv_.Forward(backend, x, v_));

  SY_ASSIGN_OR_RETURN(q_rot_, backend.Allocate(act, Shape{n, q_out}));
  SY_ASSIGN_OR_RETURN(k_rot_, backend.Allocate(act, Shape{n, kv_out}));
  SY_RETURN_IF_ERROR(NormRope(backend, batch, &q_norm_, num_heads_, q_raw_, q_rot_));
  SY_RETURN_IF_ERROR(NormRope(backend, batch, &k_norm_, num_kv_heads_, k_raw_, k_rot_));

  SY_ASSIGN_OR_RETURN(attn_, backend.Allocate(act, Shape{n, q_out}));
  if (batch.kv_cache != nullptr) {
    SY_RETURN_IF_ERROR(batch.kv_cache->Attend(backend, layer_, q_rot_, k_rot_, v_, attn_));
    SY_RETURN_IF_ERROR(wo_.Forward(backend, attn_, y));
    Release();  // incremental mode is forward-only
    return Status::Ok();
  }
  const int64_t b = batch.batch, t = batch.seq_len;
  SY_ASSIGN_OR_RETURN(lse_, backend.Allocate(DType::kF32, Shape{b, num_heads_, t}));
  backend.Attention(q_rot_.Reshape({b, t, num_heads_, head_dim_}),
                    k_rot_.Reshape({b, t, num_kv_heads_, head_dim_}),
                    v_.Reshape({b, t, num_kv_heads_, head_dim_}),
                    attn_.Reshape({b, t, num_heads_, head_dim_}), lse_, Options());
  SY_RETURN_IF_ERROR(wo_.Forward(backend, attn_, y));
  x_ = x;
  return Status::Ok();
}

Status AttentionBlock::Backward(Backend& backend, const TokenBatch& batch, const Tensor& dy,
                                const Tensor& dx) {
  SY_CHECK(x_.defined()) << "AttentionBlock::Backward without a Forward";
  const int64_t n = x_.dim(0);
  const int64_t b = batch.batch, t = batch.seq_len;
  SY_ASSIGN_OR_RETURN(Tensor dattn, backend.Allocate(attn_.dtype(), attn_.shape()));
  SY_RETURN_IF_ERROR(wo_.Backward(backend, attn_, dy, dattn, 0.0f));

  SY_ASSIGN_OR_RETURN(Tensor dq_rot, backend.Allocate(q_rot_.dtype(), q_rot_.shape()));
  SY_ASSIGN_OR_RETURN(Tensor dk_rot, backend.Allocate(k_rot_.dtype(), k_rot_.shape()));
  SY_ASSIGN_OR_RETURN(Tensor dv, backend.Allocate(v_.dtype(), v_.shape()));
  backend.AttentionBackward(q_rot_.Reshape({b, t, num_heads_, head_dim_}),
                            k_rot_.Reshape({b, t, num_kv_heads_, head_dim_}),
                            v_.Reshape({b, t, num_kv_heads_, head_dim_}),
                            attn_.Reshape({b, t, num_heads_, head_dim_}), lse_,
                            dattn.Reshape({b, t, num_heads_, head_dim_}),
                            dq_rot.Reshape({b, t, num_heads_, head_dim_}),
                            dk_rot.Reshape({b, t, num_kv_heads_, head_dim_}),
                            dv.Reshape({b, t, num_kv_heads_, head_dim_}), Options());

  SY_ASSIGN_OR_RETURN(Tensor dq_raw, backend.Allocate(q_raw_.dtype(), q_raw_.shape()));
  SY_ASSIGN_OR_RETURN(Tensor dk_raw, backend.Allocate(k_raw_.dtype(), k_raw_.shape()));
  SY_RETURN_IF_ERROR(NormRopeBackward(backend, batch, &q_norm_, num_heads_, dq_rot, dq_raw));
  SY_RETURN_IF_ERROR(NormRopeBackward(backend, batch, &k_norm_, num_kv_heads_, dk_rot, dk_raw));

  SY_CHECK(dx.rank() == 2 && dx.dim(0) == n) << "AttentionBlock dx " << dx.ToString();
  SY_RETURN_IF_ERROR(wq_.Backward(backend, x_, dq_raw, dx, 0.0f));
  SY_RETURN_IF_ERROR(wk_.Backward(backend, x_, dk_raw, dx, 1.0f));
  SY_RETURN_IF_ERROR(wv_.Backward(backend, x_, dv, dx, 1.0f));
  return Status::Ok();
}

void AttentionBlock::Release() {
  x_ = q_raw_ = k_raw_ = q_rot_ = k_rot_ = v_ = attn_ = lse_ = Tensor();
  q_norm_.Release();
  k_norm_.Release();
}

}  // namespace sy
