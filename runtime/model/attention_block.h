// AttentionBlock: causal self-attention with grouped-query heads, optional q/k/v and o biases,
// optional q/k RMSNorm and rotary embeddings, and its backward.
//
//   q = x Wq^T (+bq)  [N, Hq*D]      k = x Wk^T (+bk)  [N, Hkv*D]      v = x Wv^T (+bv)
//   q, k <- RmsNorm (qk_norm: per head over D, or over the whole projection)
//   q, k <- RoPE(positions, rope_theta)   (rotate-half, Hugging Face convention)
//   o = causal_attention(q, k, v) with scale 1/sqrt(D), query head h reading kv head h/(Hq/Hkv)
//   y = o Wo^T (+bo)  [N, hidden]
// Tokens are N = B*T rows in (batch, position) order; q is [B,T,Hq,D] and k, v are [B,S,Hkv,D]
// (S = T here). In incremental mode (TokenBatch::kv_cache) the same projections, norms and RoPE
// run on the new tokens, whose keys and values join the KV cache, and the queries attend over the
// cache (runtime/model/kv_cache.h): prefill and decode run this one block.
//
// Forward keeps what Backward needs (x, the projections before and after norm/RoPE, the attention
// output and its log-sum-exp); Release drops it. Parameter gradients accumulate.
// Ownership: parameter views from a ParameterStore. Thread-safety: as the Backend's operators.
#pragma once

#include <cstdint>

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/model/linear.h"
#include "runtime/model/model_config.h"
#include "runtime/model/parameter_store.h"
#include "runtime/model/rms_norm_layer.h"

namespace sy {

class KvCache;

// The shape of a batch of sequences and the position of every token.
struct TokenBatch {
  int64_t batch = 0;    // B
  int64_t seq_len = 0;  // T
  Tensor positions;     // i32 [B*T] on the backend: position of each token in its sequence
  // Incremental mode: when set, the B rows x T tokens are the current step of this KV cache
  // (runtime/model/kv_cache.h; KvCache::Begin was called); attention appends their keys and
  // values to it and attends over everything cached. Null: the batch attends over itself.
  KvCache* kv_cache = nullptr;
  int64_t num_tokens() const { return batch * seq_len; }
};

class AttentionBlock {
 public:
  AttentionBlock() = default;
  // Registers layers/{layer}/attn/... in `store`.
  static Result<AttentionBlock> Create(Backend& backend, ParameterStore& store,
                                       const ModelConfig& config, int layer, DType weight_dtype,
                                       bool with_grad);

  // x [N, hidden] -> y [N, hidden]. With batch.kv_cache set, over the cache (forward only: keeps
  // nothing for Backward).
  Status Forward(Backend& backend, const TokenBatch& batch, const Tensor& x, const Tensor& y);
  // dy [N, hidden] -> dx [N, hidden] (overwritten).
  Status Backward(Backend& backend, const TokenBatch& batch, const Tensor& dy, const Tensor& dx);
  void Release();

 private:
  // The q or k path after its projection: optional norm, then RoPE. raw [N, H*D] -> rot.
  Status NormRope(Backend& backend, const TokenBatch& batch, RmsNormLayer* norm, int heads,
                  const Tensor& raw, const Tensor& rot);
  Status NormRopeBackward(Backend& backend, const TokenBatch& batch, RmsNormLayer* norm, int heads,
                          const Tensor& drot, const Tensor& draw);
  AttentionOptions Options() const;

  int layer_ = 0;
  int num_heads_ = 0;
  int num_kv_heads_ = 0;
  int64_t head_dim_ = 0;
  RopeOptions rope_;
  bool qk_norm_ = false;
  bool qk_norm_per_head_ = true;
  Linear wq_, wk_, wv_, wo_;
  RmsNormLayer q_norm_, k_norm_;

  // Saved for the backward.
  Tensor x_, q_raw_, k_raw_, q_rot_, k_rot_, v_, attn_, lse_;
};

}  // namespace sy
