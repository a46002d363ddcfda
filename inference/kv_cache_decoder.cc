#include "inference/kv_cache_decoder.h"

#include <algorithm>
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

Result<std::unique_ptr<KvCacheDecoder>> KvCacheDecoder::Create(MoeModel& model, int64_t max_seq_len,
                                                               int batch,
                                                               ExpertProvider* provider) {
  return CreateWithSharedPrefix(model, 0, max_seq_len, batch, provider);
}

Result<std::unique_ptr<KvCacheDecoder>> KvCacheDecoder::CreateWithSharedPrefix(
    MoeModel& model, int64_t prefix_capacity, int64_t max_seq_len, int batch,
    ExpertProvider* provider) {
  const ModelConfig& c = model.config();
  if (prefix_capacity < 0) {
    return InvalidArgumentError("KvCacheDecoder: prefix_capacity must be >= 0");
  }
  if (max_seq_len < 1) return InvalidArgumentError("KvCacheDecoder: max_seq_len must be >= 1");
  if (batch < 1) return InvalidArgumentError("KvCacheDecoder: batch must be >= 1");
  if (provider != nullptr && provider->model() == nullptr) {
    SY_RETURN_IF_ERROR(provider->Install(model));
  }
  if (provider != nullptr && provider->model() != &model) {
    return FailedPreconditionError("KvCacheDecoder: expert provider '" + provider->name() +
                                   "' is installed on another model");
  }
  std::unique_ptr<KvCacheDecoder> d(
      new KvCacheDecoder(model, provider, prefix_capacity, max_seq_len, batch));
  const int64_t rows = max_seq_len * batch;
  Backend& backend = model.backend();
  const int64_t kv_out = c.kv_heads() * c.dim_per_head();
  for (int l = 0; l < c.num_layers; ++l) {
    SY_ASSIGN_OR_RETURN(Tensor k, backend.Allocate(DType::kF32, Shape{rows, kv_out}));
    SY_ASSIGN_OR_RETURN(Tensor v, backend.Allocate(DType::kF32, Shape{rows, kv_out}));
    d->k_cache_.push_back(k);
    d->v_cache_.push_back(v);
    if (prefix_capacity > 0) {
      SY_ASSIGN_OR_RETURN(Tensor kp, backend.Allocate(DType::kF32, Shape{prefix_capacity, kv_out}));
      SY_ASSIGN_OR_RETURN(Tensor vp, backend.Allocate(DType::kF32, Shape{prefix_capacity, kv_out}));
      d->k_prefix_.push_back(kp);
      d->v_prefix_.push_back(vp);
    }
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

Status KvCacheDecoder::Layer(int l, const Step& step, const Tensor& positions, Tensor& x,
                             Tensor& routed) {
  const int64_t rows = static_cast<int64_t>(step.seqs.size());
  const int64_t t = rows * step.tokens_per_row;
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
  SY_ASSIGN_OR_RETURN(Tensor k_rot, backend.Allocate(DType::kF32, k.shape()));
  backend.Rope(k.Reshape({t, hkv, d}), positions, theta, k_rot.Reshape({t, hkv, d}));
  SY_ASSIGN_OR_RETURN(Tensor attn, Attend(l, step, q_rot, k_rot, v));
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
    SY_RETURN_IF_ERROR(moe.Forward(backend, hn, moe.has_gate() ? Tensor() : routed, stats_, ffn));
    routed = moe.has_pregate() ? moe.pregate_logits() : Tensor();
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

Result<Tensor> KvCacheDecoder::Attend(int l, const Step& step, const Tensor& q_rot,
                                      const Tensor& k_rot, const Tensor& v) {
  Backend& backend = model_.backend();
  const ModelConfig& c = model_.config();
  const int64_t d = c.dim_per_head();
  const int64_t hq = c.num_heads, hkv = c.kv_heads();
  const int64_t rows = static_cast<int64_t>(step.seqs.size());
  const int64_t per_row = step.tokens_per_row;
  const int64_t t = rows * per_row;
  AttentionOptions options;
  options.scale = 1.0f / std::sqrt(static_cast<float>(d));
  SY_ASSIGN_OR_RETURN(Tensor attn, backend.Allocate(DType::kF32, Shape{t, hq * d}));
  if (step.shared) {
    const Tensor& kp = k_prefix_[static_cast<size_t>(l)];
    const Tensor& vp = v_prefix_[static_cast<size_t>(l)];
    const int64_t at = step.starts[0];
    backend.CopyAsync(k_rot, kp.Slice(at, at + per_row), backend.compute_stream());
    backend.CopyAsync(v, vp.Slice(at, at + per_row), backend.compute_stream());
    options.kv_lens = {static_cast<int32_t>(at + per_row)};
    backend.Attention(q_rot.Reshape({1, per_row, hq, d}), kp.Reshape({1, prefix_capacity_, hkv, d}),
                      vp.Reshape({1, prefix_capacity_, hkv, d}), attn.Reshape({1, per_row, hq, d}),
                      Tensor(), options);
    return attn;
  }
  // Each attention row's new keys and values go to its sequence's next rows of the cache.
  const Tensor& k_cache = k_cache_[static_cast<size_t>(l)];
  const Tensor& v_cache = v_cache_[static_cast<size_t>(l)];
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t at =
        step.seqs[static_cast<size_t>(i)] * max_seq_len_ + step.starts[static_cast<size_t>(i)];
    backend.CopyAsync(k_rot.Slice(i * per_row, (i + 1) * per_row), k_cache.Slice(at, at + per_row),
                      backend.compute_stream());
    backend.CopyAsync(v.Slice(i * per_row, (i + 1) * per_row), v_cache.Slice(at, at + per_row),
                      backend.compute_stream());
    options.kv_lens.push_back(static_cast<int32_t>(step.starts[static_cast<size_t>(i)] + per_row));
  }
  // Attention reads the whole cache when the rows are the sequences in order (a decode step),
  // else the one sequence's slice (a prefill).
  Tensor k_view = k_cache, v_view = v_cache;
  if (rows != batch()) {
    SY_CHECK_EQ(rows, 1) << "KvCacheDecoder: a partial step has one sequence";
    const int64_t first = step.seqs[0] * max_seq_len_;
    k_view = k_cache.Slice(first, first + max_seq_len_);
    v_view = v_cache.Slice(first, first + max_seq_len_);
  }
  const int64_t s_len = k_view.dim(0) / rows;
  k_view = k_view.Reshape({rows, s_len, hkv, d});
  v_view = v_view.Reshape({rows, s_len, hkv, d});
  const Tensor q = q_rot.Reshape({rows, per_row, hq, d});
  if (prefix_len_ > 0) return AttendCascade(l, step, q, options, k_view, v_view);
  backend.Attention(q, k_view, v_view, attn.Reshape({rows, per_row, hq, d}), Tensor(), options);
  return attn;
}

Result<Tensor> KvCacheDecoder::AttendCascade(int l, const Step& step, const Tensor& q,
                                             const AttentionOptions& own, const Tensor& k_own,
                                             const Tensor& v_own) {
  Backend& backend = model_.backend();
  // q [rows, tokens per row, Hq, D]; k_own [rows, S, Hkv, D].
  const int64_t rows = q.dim(0), per_row = q.dim(1), hq = q.dim(2), d = q.dim(3);
  const int64_t hkv = k_own.dim(2);
  const int64_t qr = rows * per_row * hq;  // query rows: (token, head) pairs
  // parts rows [0, qr): the prefix attention, in folded order; [qr, 2 qr): the own attention,
  // row token * Hq + head. lses likewise, the own half in Attention's [B, Hq, T] layout.
  SY_ASSIGN_OR_RETURN(Tensor parts, backend.Allocate(DType::kF32, Shape{2 * qr, d}));
  SY_ASSIGN_OR_RETURN(Tensor lses, backend.Allocate(DType::kF32, Shape{2 * qr, 1}));
  backend.Attention(q, k_own, v_own, parts.Slice(qr, 2 * qr).Reshape({rows, per_row, hq, d}),
                    lses.Slice(qr, 2 * qr).Reshape({rows, hq, per_row}), own);

  SY_ASSIGN_OR_RETURN(Tensor q_fold, backend.Allocate(DType::kF32, Shape{qr, d}));
  backend.GatherRows(q.Reshape({qr, d}), step.fold, q_fold);
  AttentionOptions prefix;
  prefix.scale = own.scale;
  prefix.kv_lens = {static_cast<int32_t>(prefix_len_)};
  backend.Attention(q_fold.Reshape({1, 1, qr, d}),
                    k_prefix_[static_cast<size_t>(l)].Reshape({1, prefix_capacity_, hkv, d}),
                    v_prefix_[static_cast<size_t>(l)].Reshape({1, prefix_capacity_, hkv, d}),
                    parts.Slice(0, qr).Reshape({1, 1, qr, d}),
                    lses.Slice(0, qr).Reshape({1, qr, 1}), prefix);

  // (w_prefix, w_own) = softmax(lse_prefix, lse_own) per query row, then
  // out[row] = w_prefix * prefix[row] + w_own * own[row].
  SY_ASSIGN_OR_RETURN(Tensor pairs, backend.Allocate(DType::kF32, Shape{2 * qr, 1}));
  backend.GatherRows(lses, step.pair, pairs);
  SY_ASSIGN_OR_RETURN(Tensor w, backend.Allocate(DType::kF32, Shape{qr, 2}));
  backend.Softmax(pairs.Reshape({qr, 2}), w);
  SY_ASSIGN_OR_RETURN(Tensor weights, backend.Allocate(DType::kF32, Shape{2 * qr, 1}));
  backend.GatherRows(w.Reshape({2 * qr, 1}), step.weight_of, weights);
  SY_ASSIGN_OR_RETURN(Tensor attn, backend.Allocate(DType::kF32, Shape{qr, d}));
  backend.Fill(attn, 0.0f);
  backend.ScatterAddRows(parts, step.scatter, weights.Reshape({2 * qr}), attn);
  return attn.Reshape({rows * per_row, hq * d});
}

Status KvCacheDecoder::MakeCascadeTables(Step& step) const {
  const ModelConfig& c = model_.config();
  const int64_t hq = c.num_heads, g = hq / c.kv_heads();
  const int64_t per_row = step.tokens_per_row;
  const int64_t t = static_cast<int64_t>(step.seqs.size()) * per_row;
  const int64_t qr = t * hq;
  std::vector<int32_t> fold(static_cast<size_t>(qr)), pair(static_cast<size_t>(2 * qr));
  std::vector<int32_t> weight_of(static_cast<size_t>(2 * qr)), scatter(static_cast<size_t>(2 * qr));
  for (int64_t i = 0; i < t; ++i) {
    const int64_t row = i / per_row, j = i % per_row;
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t o = i * hq + h;                           // output row: token i, head h
      const int64_t f = (h / g) * (t * g) + i * g + (h % g);  // folded: [Hkv, tokens, Hq/Hkv]
      const int64_t own_lse = (row * hq + h) * per_row + j;   // Attention's lse [B, Hq, T]
      const auto at = [](int64_t x) { return static_cast<size_t>(x); };
      fold[at(f)] = static_cast<int32_t>(o);
      pair[at(2 * o)] = static_cast<int32_t>(f);
      pair[at(2 * o + 1)] = static_cast<int32_t>(qr + own_lse);
      weight_of[at(f)] = static_cast<int32_t>(2 * o);
      weight_of[at(qr + o)] = static_cast<int32_t>(2 * o + 1);
      scatter[at(f)] = static_cast<int32_t>(o);
      scatter[at(qr + o)] = static_cast<int32_t>(o);
    }
  }
  Backend& backend = model_.backend();
  SY_ASSIGN_OR_RETURN(step.fold, UploadI32(backend, fold));
  SY_ASSIGN_OR_RETURN(step.pair, UploadI32(backend, pair));
  SY_ASSIGN_OR_RETURN(step.weight_of, UploadI32(backend, weight_of));
  SY_ASSIGN_OR_RETURN(step.scatter, UploadI32(backend, scatter));
  return Status::Ok();
}

Result<std::vector<float>> KvCacheDecoder::Prefill(int seq, std::span<const int32_t> tokens) {
  if (seq < 0 || seq >= batch()) {
    return InvalidArgumentError("KvCacheDecoder::Prefill: sequence " + std::to_string(seq) +
                                " outside [0, " + std::to_string(batch()) + ")");
  }
  if (tokens.empty()) return InvalidArgumentError("KvCacheDecoder::Prefill: no tokens");
  Step step;
  step.tokens_per_row = static_cast<int64_t>(tokens.size());
  step.prefill = true;
  step.seqs = {seq};
  step.starts = {lengths_[static_cast<size_t>(seq)]};
  return Run(step, std::vector<int32_t>(tokens.begin(), tokens.end()));
}

Result<std::vector<float>> KvCacheDecoder::PrefillShared(std::span<const int32_t> tokens) {
  if (prefix_capacity_ == 0) {
    return FailedPreconditionError(
        "KvCacheDecoder::PrefillShared: this decoder has no shared prefix "
        "(CreateWithSharedPrefix)");
  }
  if (std::any_of(lengths_.begin(), lengths_.end(), [](int64_t n) { return n > 0; })) {
    return FailedPreconditionError(
        "KvCacheDecoder::PrefillShared: a sequence has tokens of its own already; the shared "
        "prefix must come first (Reset)");
  }
  if (tokens.empty()) return InvalidArgumentError("KvCacheDecoder::PrefillShared: no tokens");
  Step step;
  step.tokens_per_row = static_cast<int64_t>(tokens.size());
  step.prefill = true;
  step.shared = true;
  step.seqs = {-1};
  step.starts = {prefix_len_};
  return Run(step, std::vector<int32_t>(tokens.begin(), tokens.end()));
}

void KvCacheDecoder::CopySequence(int dst, int src) {
  SY_CHECK(dst >= 0 && dst < batch() && src >= 0 && src < batch()) << dst << " " << src;
  if (dst == src) return;
  const int64_t len = lengths_[static_cast<size_t>(src)];
  Backend& backend = model_.backend();
  if (len > 0) {
    for (size_t l = 0; l < k_cache_.size(); ++l) {
      for (std::vector<Tensor>* cache : {&k_cache_, &v_cache_}) {
        const Tensor& c = (*cache)[l];
        backend.CopyAsync(c.Slice(src * max_seq_len_, src * max_seq_len_ + len),
                          c.Slice(dst * max_seq_len_, dst * max_seq_len_ + len),
                          backend.compute_stream());
      }
    }
  }
  lengths_[static_cast<size_t>(dst)] = len;
}

Result<std::vector<float>> KvCacheDecoder::Decode(std::span<const int32_t> tokens) {
  if (static_cast<int>(tokens.size()) != batch()) {
    return InvalidArgumentError("KvCacheDecoder::Decode: " + std::to_string(tokens.size()) +
                                " tokens for " + std::to_string(batch()) + " sequences");
  }
  Step step;
  step.tokens_per_row = 1;
  for (int b = 0; b < batch(); ++b) {
    step.seqs.push_back(b);
    step.starts.push_back(lengths_[static_cast<size_t>(b)]);
  }
  return Run(step, std::vector<int32_t>(tokens.begin(), tokens.end()));
}

Status KvCacheDecoder::Layers(const Step& step, const Tensor& positions, Tensor& x) {
  Backend& backend = model_.backend();
  if (provider_ != nullptr) {
    SY_RETURN_IF_ERROR(
        provider_->BeginStep(backend, ExpertStep{.num_tokens = x.dim(0), .prefill = step.prefill}));
  }
  Tensor routed;
  Status status = Status::Ok();
  for (int l = 0; l < model_.config().num_layers && status.ok(); ++l) {
    status = Layer(l, step, positions, x, routed);
  }
  // The provider sees the end of every step it saw begin, failed ones included.
  if (provider_ != nullptr) {
    const Status ended = provider_->EndStep(backend);
    if (status.ok()) status = ended;
  }
  return status;
}

Result<std::vector<float>> KvCacheDecoder::Run(Step& step, const std::vector<int32_t>& ids) {
  const ModelConfig& c = model_.config();
  const int64_t t = static_cast<int64_t>(ids.size());
  std::vector<int32_t> pos;
  // Own tokens sit after the shared prefix; the prefix's own tokens from position 0.
  const int64_t first_position = step.shared ? 0 : prefix_len_;
  const int64_t limit = step.shared ? prefix_capacity_ : max_seq_len_;
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    if (step.starts[i] + step.tokens_per_row > limit) {
      const std::string what =
          step.shared ? "the shared prefix" : "sequence " + std::to_string(step.seqs[i]);
      return InvalidArgumentError(what + " would reach " +
                                  std::to_string(step.starts[i] + step.tokens_per_row) +
                                  " tokens, past the KV cache's " + std::to_string(limit) +
                                  "; raise the cache length (--max-tokens bounds it)");
    }
    for (int64_t j = 0; j < step.tokens_per_row; ++j) {
      pos.push_back(static_cast<int32_t>(first_position + step.starts[i] + j));
    }
  }
  for (int32_t id : ids) {
    if (id < 0 || id >= c.vocab_size) {
      return InvalidArgumentError("token id " + std::to_string(id) + " outside [0, vocab_size = " +
                                  std::to_string(c.vocab_size) + ")");
    }
  }
  Backend& backend = model_.backend();
  if (!step.shared && prefix_len_ > 0) SY_RETURN_IF_ERROR(MakeCascadeTables(step));
  SY_ASSIGN_OR_RETURN(Tensor ids_dev, UploadI32(backend, ids));
  SY_ASSIGN_OR_RETURN(Tensor positions, UploadI32(backend, pos));
  SY_ASSIGN_OR_RETURN(Tensor x, backend.Allocate(DType::kF32, Shape{t, c.hidden_size}));
  backend.EmbeddingGather(Param("embed_tokens"), ids_dev, x);
  SY_RETURN_IF_ERROR(Layers(step, positions, x));
  SY_ASSIGN_OR_RETURN(Tensor xf, backend.Allocate(DType::kF32, x.shape()));
  backend.RmsNorm(x, Param("final_norm"), static_cast<float>(c.rms_norm_eps), xf, Tensor());
  SY_ASSIGN_OR_RETURN(Tensor logits,
                      Linear(xf, c.tie_word_embeddings ? "embed_tokens" : "lm_head", ""));
  std::vector<float> out(static_cast<size_t>(logits.numel()));
  backend.CopyAsync(logits, Tensor::Wrap(out.data(), DType::kF32, logits.shape()),
                    backend.compute_stream());
  backend.SynchronizeStream(backend.compute_stream());
  if (step.shared) {
    prefix_len_ += step.tokens_per_row;
  } else {
    for (int seq : step.seqs) lengths_[static_cast<size_t>(seq)] += step.tokens_per_row;
  }
  return out;
}

}  // namespace sy
