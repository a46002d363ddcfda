#include "inference/kv_cache_decoder.h"

#include <cmath>
#include <string>

#include "runtime/core/check.h"

namespace sy {
namespace {

Result<Tensor> UploadI32(Backend& backend, const std::vector<int32_t>& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  SY_ASSIGN_OR_RETURN(Tensor dev, backend.Allocate(DType::kI32, Shape{n}));
  std::vector<int32_t> host = values;
  backend.CopyAsync(Tensor::Wrap(host.data(), DType::kI32, Shape{n}), dev,
                    backend.compute_stream());
  backend.SynchronizeStream(backend.compute_stream());
  return dev;
}

}  // namespace

Result<std::unique_ptr<KvCacheDecoder>> KvCacheDecoder::Create(MoeModel& model,
                                                               int64_t max_seq_len) {
  const ModelConfig& c = model.config();
  if (c.pregate) {
    return FailedPreconditionError("KvCacheDecoder: pre-gated models are not supported");
  }
  if (max_seq_len < 1) return InvalidArgumentError("KvCacheDecoder: max_seq_len must be >= 1");
  std::unique_ptr<KvCacheDecoder> d(new KvCacheDecoder(model, max_seq_len));
  Backend& backend = model.backend();
  const int64_t kv_out = c.kv_heads() * c.dim_per_head();
  for (int l = 0; l < c.num_layers; ++l) {
    SY_ASSIGN_OR_RETURN(Tensor k, backend.Allocate(DType::kF32, Shape{max_seq_len, kv_out}));
    SY_ASSIGN_OR_RETURN(Tensor v, backend.Allocate(DType::kF32, Shape{max_seq_len, kv_out}));
    d->k_cache_.push_back(k);
    d->v_cache_.push_back(v);
  }
  SY_ASSIGN_OR_RETURN(d->stats_, backend.Allocate(DType::kF32, Shape{2}));
  return d;
}

const Tensor& KvCacheDecoder::Param(const std::string& name) const {
  const Parameter* p = model_.parameters().Find(name);
  SY_CHECK(p != nullptr) << "KvCacheDecoder: no parameter " << name;
  return p->value;
}

Result<Tensor> KvCacheDecoder::Linear(const Tensor& x, const std::string& weight,
                                      const std::string& bias) {
  Backend& backend = model_.backend();
  const Tensor& w = Param(weight);
  SY_ASSIGN_OR_RETURN(Tensor y, backend.Allocate(DType::kF32, Shape{x.dim(0), w.dim(0)}));
  backend.Gemm(x, w, y, GemmOptions{.trans_b = true});
  if (!bias.empty() && model_.parameters().Find(bias) != nullptr) {
    SY_ASSIGN_OR_RETURN(Tensor out, backend.Allocate(DType::kF32, y.shape()));
    backend.AddBias(y, Param(bias), out);
    return out;
  }
  return y;
}

Status KvCacheDecoder::Layer(int l, const Tensor& positions, int64_t t, Tensor& x) {
  Backend& backend = model_.backend();
  const ModelConfig& c = model_.config();
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t h = c.hidden_size, d = c.dim_per_head();
  const int hq = c.num_heads, hkv = c.kv_heads();
  const std::string p = "layers/" + std::to_string(l) + "/";

  SY_ASSIGN_OR_RETURN(Tensor xn, backend.Allocate(DType::kF32, Shape{t, h}));
  backend.RmsNorm(x, Param(p + "input_norm"), eps, xn, Tensor());
  SY_ASSIGN_OR_RETURN(Tensor q, Linear(xn, p + "attn/wq", p + "attn/bq"));
  SY_ASSIGN_OR_RETURN(Tensor k, Linear(xn, p + "attn/wk", p + "attn/bk"));
  SY_ASSIGN_OR_RETURN(Tensor v, Linear(xn, p + "attn/wv", p + "attn/bv"));
  if (c.qk_norm) {
    SY_ASSIGN_OR_RETURN(Tensor qn, backend.Allocate(DType::kF32, q.shape()));
    SY_ASSIGN_OR_RETURN(Tensor kn, backend.Allocate(DType::kF32, k.shape()));
    const Shape q_rows = c.qk_norm_per_head ? Shape{t * hq, d} : q.shape();
    const Shape k_rows = c.qk_norm_per_head ? Shape{t * hkv, d} : k.shape();
    backend.RmsNorm(q.Reshape(q_rows), Param(p + "attn/q_norm"), eps, qn.Reshape(q_rows), Tensor());
    backend.RmsNorm(k.Reshape(k_rows), Param(p + "attn/k_norm"), eps, kn.Reshape(k_rows), Tensor());
    q = qn;
    k = kn;
  }
  const float theta = static_cast<float>(c.rope_theta);
  SY_ASSIGN_OR_RETURN(Tensor q_rot, backend.Allocate(DType::kF32, q.shape()));
  backend.Rope(q.Reshape({t, hq, d}), positions, theta, q_rot.Reshape({t, hq, d}));
  // New keys and values go straight into their rows of the cache.
  const Tensor k_rows = k_cache_[static_cast<size_t>(l)].Slice(length_, length_ + t);
  const Tensor v_rows = v_cache_[static_cast<size_t>(l)].Slice(length_, length_ + t);
  backend.Rope(k.Reshape({t, hkv, d}), positions, theta, k_rows.Reshape({t, hkv, d}));
  backend.CopyAsync(v, v_rows, backend.compute_stream());

  SY_ASSIGN_OR_RETURN(Tensor attn, backend.Allocate(DType::kF32, Shape{t, hq * d}));
  AttentionOptions options;
  options.scale = 1.0f / std::sqrt(static_cast<float>(d));
  options.kv_lens = {static_cast<int32_t>(length_ + t)};
  backend.Attention(q_rot.Reshape({1, t, hq, d}),
                    k_cache_[static_cast<size_t>(l)].Reshape({1, max_seq_len_, hkv, d}),
                    v_cache_[static_cast<size_t>(l)].Reshape({1, max_seq_len_, hkv, d}),
                    attn.Reshape({1, t, hq, d}), Tensor(), options);
  SY_ASSIGN_OR_RETURN(Tensor o, Linear(attn, p + "attn/wo", ""));
  SY_ASSIGN_OR_RETURN(Tensor x2, backend.Allocate(DType::kF32, Shape{t, h}));
  backend.Add(x, o, x2);

  SY_ASSIGN_OR_RETURN(Tensor hn, backend.Allocate(DType::kF32, Shape{t, h}));
  backend.RmsNorm(x2, Param(p + "post_attention_norm"), eps, hn, Tensor());
  SY_ASSIGN_OR_RETURN(Tensor ffn, backend.Allocate(DType::kF32, Shape{t, h}));
  const int m = c.MoeIndex(l);
  if (m >= 0) {
    MoeLayer& moe = model_.moe_layer(m);
    backend.Fill(stats_, 0.0f);
    SY_RETURN_IF_ERROR(moe.Forward(backend, hn, Tensor(), stats_, ffn));
    moe.Release();
  } else {
    SY_ASSIGN_OR_RETURN(Tensor g, Linear(hn, p + "mlp/w_gate", ""));
    SY_ASSIGN_OR_RETURN(Tensor u, Linear(hn, p + "mlp/w_up", ""));
    SY_ASSIGN_OR_RETURN(Tensor act, backend.Allocate(DType::kF32, g.shape()));
    backend.Swiglu(g, u, act);
    SY_ASSIGN_OR_RETURN(ffn, Linear(act, p + "mlp/w_down", ""));
  }
  SY_ASSIGN_OR_RETURN(Tensor out, backend.Allocate(DType::kF32, Shape{t, h}));
  backend.Add(x2, ffn, out);
  x = out;
  return Status::Ok();
}

Result<std::vector<float>> KvCacheDecoder::Append(std::span<const int32_t> tokens) {
  const ModelConfig& c = model_.config();
  const int64_t t = static_cast<int64_t>(tokens.size());
  if (t == 0) return InvalidArgumentError("KvCacheDecoder::Append: no tokens");
  if (length_ + t > max_seq_len_) {
    return InvalidArgumentError("sequence of " + std::to_string(length_ + t) +
                                " tokens exceeds the KV cache's " + std::to_string(max_seq_len_) +
                                "; raise the cache length (--max-tokens bounds it)");
  }
  std::vector<int32_t> ids(tokens.begin(), tokens.end());
  for (int32_t id : ids) {
    if (id < 0 || id >= c.vocab_size) {
      return InvalidArgumentError("token id " + std::to_string(id) + " outside [0, vocab_size = " +
                                  std::to_string(c.vocab_size) + ")");
    }
  }
  std::vector<int32_t> pos(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(length_ + i);
  Backend& backend = model_.backend();
  SY_ASSIGN_OR_RETURN(Tensor ids_dev, UploadI32(backend, ids));
  SY_ASSIGN_OR_RETURN(Tensor positions, UploadI32(backend, pos));
  SY_ASSIGN_OR_RETURN(Tensor x, backend.Allocate(DType::kF32, Shape{t, c.hidden_size}));
  backend.EmbeddingGather(Param("embed_tokens"), ids_dev, x);
  for (int l = 0; l < c.num_layers; ++l) SY_RETURN_IF_ERROR(Layer(l, positions, t, x));
  SY_ASSIGN_OR_RETURN(Tensor xf, backend.Allocate(DType::kF32, x.shape()));
  backend.RmsNorm(x, Param("final_norm"), static_cast<float>(c.rms_norm_eps), xf, Tensor());
  SY_ASSIGN_OR_RETURN(Tensor logits,
                      Linear(xf, c.tie_word_embeddings ? "embed_tokens" : "lm_head", ""));
  std::vector<float> out(static_cast<size_t>(logits.numel()));
  backend.CopyAsync(logits, Tensor::Wrap(out.data(), DType::kF32, logits.shape()),
                    backend.compute_stream());
  backend.SynchronizeStream(backend.compute_stream());
  length_ += t;
  return out;
}

}  // namespace sy
