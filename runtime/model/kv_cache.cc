#include "runtime/model/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/core/check.h"
#include "runtime/model/host_transfer.h"

namespace sy {
namespace {

size_t At(int64_t i) { return static_cast<size_t>(i); }

}  // namespace

KvCache::KvCache(Backend& backend, const ModelConfig& config, int batch, int64_t max_seq_len,
                 int64_t prefix_capacity)
    : backend_(backend),
      kv_out_(config.kv_heads() * config.dim_per_head()),
      head_dim_(config.dim_per_head()),
      num_heads_(config.num_heads),
      num_kv_heads_(config.kv_heads()),
      max_seq_len_(max_seq_len),
      prefix_capacity_(prefix_capacity),
      lengths_(static_cast<size_t>(batch), 0) {}

Result<std::unique_ptr<KvCache>> KvCache::Create(Backend& backend, const ModelConfig& config,
                                                 int batch, int64_t max_seq_len,
                                                 int64_t prefix_capacity) {
  if (prefix_capacity < 0) return InvalidArgumentError("KV cache: prefix_capacity must be >= 0");
  if (max_seq_len < 1) return InvalidArgumentError("KV cache: max_seq_len must be >= 1");
  if (batch < 1) return InvalidArgumentError("KV cache: batch must be >= 1");
  std::unique_ptr<KvCache> cache(new KvCache(backend, config, batch, max_seq_len, prefix_capacity));
  const int64_t rows = max_seq_len * batch;
  for (int l = 0; l < config.num_layers; ++l) {
    SY_ASSIGN_OR_RETURN(Tensor k,
                        backend.AllocatePersistent(DType::kF32, Shape{rows, cache->kv_out_}));
    SY_ASSIGN_OR_RETURN(Tensor v,
                        backend.AllocatePersistent(DType::kF32, Shape{rows, cache->kv_out_}));
    cache->k_cache_.push_back(k);
    cache->v_cache_.push_back(v);
    if (prefix_capacity > 0) {
      SY_ASSIGN_OR_RETURN(Tensor kp, backend.AllocatePersistent(
                                         DType::kF32, Shape{prefix_capacity, cache->kv_out_}));
      SY_ASSIGN_OR_RETURN(Tensor vp, backend.AllocatePersistent(
                                         DType::kF32, Shape{prefix_capacity, cache->kv_out_}));
      cache->k_prefix_.push_back(kp);
      cache->v_prefix_.push_back(vp);
    }
  }
  return cache;
}

size_t KvCache::bytes() const {
  size_t total = 0;
  for (const auto* tensors : {&k_cache_, &v_cache_, &k_prefix_, &v_prefix_}) {
    for (const Tensor& t : *tensors) total += t.nbytes();
  }
  return total;
}

int64_t KvCache::BytesPerToken(const ModelConfig& config) {
  return int64_t{2} * config.num_layers * config.kv_heads() * config.dim_per_head() *
         static_cast<int64_t>(sizeof(float));
}

Status KvCache::Begin(const KvStep& step) {
  SY_CHECK(step.tokens_per_row >= 1 && !step.seqs.empty() && step.seqs.size() == step.starts.size())
      << "KvCache::Begin: a malformed step";
  if (step.shared) {
    if (prefix_capacity_ == 0) {
      return FailedPreconditionError("this KV cache has no shared prefix (prefix_capacity 0)");
    }
    if (std::any_of(lengths_.begin(), lengths_.end(), [](int64_t n) { return n > 0; })) {
      return FailedPreconditionError(
          "a sequence has tokens of its own already; the shared prefix must come first (Reset)");
    }
  }
  const int64_t limit = step.shared ? prefix_capacity_ : max_seq_len_;
  // Own tokens sit after the shared prefix; the prefix's own tokens from position 0.
  const int64_t first_position = step.shared ? 0 : prefix_len_;
  positions_.clear();
  kv_lens_.clear();
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    if (!step.shared && (step.seqs[i] < 0 || step.seqs[i] >= batch())) {
      return InvalidArgumentError("sequence " + std::to_string(step.seqs[i]) + " outside [0, " +
                                  std::to_string(batch()) + ")");
    }
    const int64_t end = step.starts[i] + step.tokens_per_row;
    if (end > limit) {
      const std::string what =
          step.shared ? "the shared prefix" : "sequence " + std::to_string(step.seqs[i]);
      return InvalidArgumentError(what + " would reach " + std::to_string(end) +
                                  " tokens, past the KV cache's " + std::to_string(limit) +
                                  "; raise the cache length (--max-tokens bounds it)");
    }
    for (int64_t j = 0; j < step.tokens_per_row; ++j) {
      positions_.push_back(static_cast<int32_t>(first_position + step.starts[i] + j));
    }
    kv_lens_.push_back(static_cast<int32_t>(end));
  }
  step_.tokens_per_row = step.tokens_per_row;
  step_.shared = step.shared;
  step_.seqs.assign(step.seqs.begin(), step.seqs.end());
  step_.starts.assign(step.starts.begin(), step.starts.end());
  in_step_ = true;
  if (!step.shared && prefix_len_ > 0) return MakeCascadeTables();
  return Status::Ok();
}

void KvCache::Commit() {
  SY_CHECK(in_step_) << "KvCache::Commit without a Begin";
  if (step_.shared) {
    prefix_len_ += step_.tokens_per_row;
  } else {
    for (int seq : step_.seqs) lengths_[static_cast<size_t>(seq)] += step_.tokens_per_row;
  }
  in_step_ = false;
}

Status KvCache::Attend(Backend& backend, int layer, const Tensor& q_rot, const Tensor& k_rot,
                       const Tensor& v, const Tensor& out) {
  SY_CHECK(in_step_) << "KvCache::Attend outside a step (Begin)";
  const int64_t d = head_dim_, hq = num_heads_, hkv = num_kv_heads_;
  const int64_t rows = static_cast<int64_t>(step_.seqs.size());
  const int64_t per_row = step_.tokens_per_row;
  SY_CHECK(q_rot.shape() == (Shape{rows * per_row, hq * d}) && out.shape() == q_rot.shape())
      << "KvCache::Attend: q " << q_rot.ToString() << ", out " << out.ToString();
  const auto l = static_cast<size_t>(layer);
  if (step_.shared) {
    const Tensor& kp = k_prefix_[l];
    const Tensor& vp = v_prefix_[l];
    const int64_t at = step_.starts[0];
    backend.CopyAsync(k_rot, kp.Slice(at, at + per_row), backend.compute_stream());
    backend.CopyAsync(v, vp.Slice(at, at + per_row), backend.compute_stream());
    attention_.scale = 1.0f / std::sqrt(static_cast<float>(d));
    attention_.kv_lens.assign(1, static_cast<int32_t>(at + per_row));
    backend.Attention(q_rot.Reshape({1, per_row, hq, d}), kp.Reshape({1, prefix_capacity_, hkv, d}),
                      vp.Reshape({1, prefix_capacity_, hkv, d}), out.Reshape({1, per_row, hq, d}),
                      Tensor(), attention_);
    return Status::Ok();
  }
  // Each attention row's new keys and values go to its sequence's next rows of the cache.
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t at = step_.seqs[At(i)] * max_seq_len_ + step_.starts[At(i)];
    backend.CopyAsync(k_rot.Slice(i * per_row, (i + 1) * per_row),
                      k_cache_[l].Slice(at, at + per_row), backend.compute_stream());
    backend.CopyAsync(v.Slice(i * per_row, (i + 1) * per_row), v_cache_[l].Slice(at, at + per_row),
                      backend.compute_stream());
  }
  Tensor parts, lses;
  const int64_t qr = rows * per_row * hq;  // query rows: (token, head) pairs
  if (prefix_len_ > 0) {
    // parts rows [0, qr): the prefix attention, in folded order; [qr, 2 qr): the own attention,
    // row token * Hq + head. lses likewise, the own half in Attention's [B, Hq, T] layout.
    SY_ASSIGN_OR_RETURN(parts, backend.Allocate(DType::kF32, Shape{2 * qr, d}));
    SY_ASSIGN_OR_RETURN(lses, backend.Allocate(DType::kF32, Shape{2 * qr, 1}));
  }
  // One Attention call per run of rows whose sequences are consecutive: a decode step of every
  // sequence in order is one call over the whole cache, a prefill one call over its sequence.
  for (int64_t begin = 0; begin < rows;) {
    int64_t end = begin + 1;
    while (end < rows && step_.seqs[At(end)] == step_.seqs[At(end - 1)] + 1) ++end;
    const int64_t first = step_.seqs[At(begin)] * max_seq_len_;
    const int64_t run = end - begin;
    const Tensor k_view = k_cache_[l].Slice(first, first + run * max_seq_len_);
    const Tensor v_view = v_cache_[l].Slice(first, first + run * max_seq_len_);
    const Tensor q = q_rot.Slice(begin * per_row, end * per_row).Reshape({run, per_row, hq, d});
    attention_.scale = 1.0f / std::sqrt(static_cast<float>(d));
    attention_.kv_lens.assign(kv_lens_.begin() + begin, kv_lens_.begin() + end);
    Tensor run_out = out.Slice(begin * per_row, end * per_row).Reshape({run, per_row, hq, d});
    Tensor run_lse;
    if (prefix_len_ > 0) {
      const int64_t span = per_row * hq;
      run_out = parts.Slice(qr + begin * span, qr + end * span).Reshape({run, per_row, hq, d});
      run_lse = lses.Slice(qr + begin * span, qr + end * span).Reshape({run, hq, per_row});
    }
    backend.Attention(q, k_view.Reshape({run, max_seq_len_, hkv, d}),
                      v_view.Reshape({run, max_seq_len_, hkv, d}), run_out, run_lse, attention_);
    begin = end;
  }
  if (prefix_len_ > 0) return AttendPrefixAndMerge(backend, layer, q_rot, parts, lses, out);
  return Status::Ok();
}

Status KvCache::AttendPrefixAndMerge(Backend& backend, int layer, const Tensor& q_rot,
                                     const Tensor& parts, const Tensor& lses, const Tensor& out) {
  const int64_t d = head_dim_, hkv = num_kv_heads_;
  const int64_t qr = parts.dim(0) / 2;
  const auto l = static_cast<size_t>(layer);
  SY_ASSIGN_OR_RETURN(Tensor q_fold, backend.Allocate(DType::kF32, Shape{qr, d}));
  backend.GatherRows(q_rot.Reshape({qr, d}), fold_, q_fold);
  attention_.scale = 1.0f / std::sqrt(static_cast<float>(d));
  attention_.kv_lens.assign(1, static_cast<int32_t>(prefix_len_));
  backend.Attention(
      q_fold.Reshape({1, 1, qr, d}), k_prefix_[l].Reshape({1, prefix_capacity_, hkv, d}),
      v_prefix_[l].Reshape({1, prefix_capacity_, hkv, d}),
      parts.Slice(0, qr).Reshape({1, 1, qr, d}), lses.Slice(0, qr).Reshape({1, qr, 1}), attention_);

  // (w_prefix, w_own) = softmax(lse_prefix, lse_own) per query row, then
  // out[row] = w_prefix * prefix[row] + w_own * own[row].
  SY_ASSIGN_OR_RETURN(Tensor pairs, backend.Allocate(DType::kF32, Shape{2 * qr, 1}));
  backend.GatherRows(lses, pair_, pairs);
  SY_ASSIGN_OR_RETURN(Tensor w, backend.Allocate(DType::kF32, Shape{qr, 2}));
  backend.Softmax(pairs.Reshape({qr, 2}), w);
  SY_ASSIGN_OR_RETURN(Tensor weights, backend.Allocate(DType::kF32, Shape{2 * qr, 1}));
  backend.GatherRows(w.Reshape({2 * qr, 1}), weight_of_, weights);
  const Tensor merged = out.Reshape({qr, d});
  backend.Fill(merged, 0.0f);
  backend.ScatterAddRows(parts, scatter_, weights.Reshape({2 * qr}), merged);
  return Status::Ok();
}

Status KvCache::MakeCascadeTables() {
  const int64_t hq = num_heads_, g = hq / num_kv_heads_;
  const int64_t per_row = step_.tokens_per_row;
  const int64_t t = step_.num_tokens();
  const int64_t qr = t * hq;
  fold_host_.resize(At(qr));
  pair_host_.resize(At(2 * qr));
  weight_of_host_.resize(At(2 * qr));
  scatter_host_.resize(At(2 * qr));
  for (int64_t i = 0; i < t; ++i) {
    const int64_t row = i / per_row, j = i % per_row;
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t o = i * hq + h;                           // output row: token i, head h
      const int64_t f = (h / g) * (t * g) + i * g + (h % g);  // folded: [Hkv, tokens, Hq/Hkv]
      const int64_t own_lse = (row * hq + h) * per_row + j;   // Attention's lse [B, Hq, T]
      fold_host_[At(f)] = static_cast<int32_t>(o);
      pair_host_[At(2 * o)] = static_cast<int32_t>(f);
      pair_host_[At(2 * o + 1)] = static_cast<int32_t>(qr + own_lse);
      weight_of_host_[At(f)] = static_cast<int32_t>(2 * o);
      weight_of_host_[At(qr + o)] = static_cast<int32_t>(2 * o + 1);
      scatter_host_[At(f)] = static_cast<int32_t>(o);
      scatter_host_[At(qr + o)] = static_cast<int32_t>(o);
    }
  }
  SY_ASSIGN_OR_RETURN(fold_, UploadI32(backend_, fold_host_, Shape{int64_t(fold_host_.size())}));
  SY_ASSIGN_OR_RETURN(pair_, UploadI32(backend_, pair_host_, Shape{int64_t(pair_host_.size())}));
  SY_ASSIGN_OR_RETURN(weight_of_,
                      UploadI32(backend_, weight_of_host_, Shape{int64_t(weight_of_host_.size())}));
  SY_ASSIGN_OR_RETURN(scatter_,
                      UploadI32(backend_, scatter_host_, Shape{int64_t(scatter_host_.size())}));
  return Status::Ok();
}

void KvCache::CopySequence(int dst, int src) {
  SY_CHECK(dst >= 0 && dst < batch() && src >= 0 && src < batch()) << dst << " " << src;
  if (dst == src) return;
  const int64_t len = lengths_[static_cast<size_t>(src)];
  if (len > 0) {
    for (size_t l = 0; l < k_cache_.size(); ++l) {
      for (std::vector<Tensor>* cache : {&k_cache_, &v_cache_}) {
        const Tensor& c = (*cache)[l];
        backend_.CopyAsync(c.Slice(src * max_seq_len_, src * max_seq_len_ + len),
                           c.Slice(dst * max_seq_len_, dst * max_seq_len_ + len),
                           backend_.compute_stream());
      }
    }
  }
  lengths_[static_cast<size_t>(dst)] = len;
}

void KvCache::Reset() {
  lengths_.assign(lengths_.size(), 0);
  prefix_len_ = 0;
  in_step_ = false;
}

void KvCache::ResetSequence(int seq) {
  SY_CHECK(seq >= 0 && seq < batch()) << "KvCache::ResetSequence " << seq;
  lengths_[static_cast<size_t>(seq)] = 0;
}

}  // namespace sy
