// KvCacheDecoder: prefill and decode of one sequence over a loaded (forward-only) MoeModel, with a
// KV cache, so each new token costs one token's compute instead of the whole sequence's.
//
//   SY_ASSIGN_OR_RETURN(auto dec, KvCacheDecoder::Create(model, max_seq_len));
//   SY_ASSIGN_OR_RETURN(auto logits, dec->Append(prompt));      // prefill: [T, vocab]
//   SY_ASSIGN_OR_RETURN(logits, dec->Append({next_token}));      // decode:  [1, vocab]
//
// The layer math is MoeModel's (runtime/model/decoder_layer.h) on the model's own parameter
// tensors; the MoE FFN runs through the model's MoeLayer. The cache holds, per layer, the keys
// after q/k norm and RoPE and the values, f32 [max_seq_len, kv_heads * head_dim] on the backend.
// Pre-gated models are not supported here (no Hugging Face family uses them).
//
// Ownership: borrows the model (it must outlive the decoder) and owns the cache. Thread-safety:
// one thread at a time, the thread that drives the backend's compute stream.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/model/moe_model.h"

namespace sy {

class KvCacheDecoder {
 public:
  // FailedPrecondition for a pre-gated model; ResourceExhausted when the cache does not fit.
  static Result<std::unique_ptr<KvCacheDecoder>> Create(MoeModel& model, int64_t max_seq_len);

  // Runs `tokens` at positions length() .. length() + T - 1 and returns their logits, f32
  // row-major [T, vocab] in host memory. InvalidArgument when the cache would overflow or an id
  // is out of range.
  Result<std::vector<float>> Append(std::span<const int32_t> tokens);

  int64_t length() const { return length_; }
  int64_t capacity() const { return max_seq_len_; }
  // Forgets the sequence (the cache is reused).
  void Reset() { length_ = 0; }

 private:
  KvCacheDecoder(MoeModel& model, int64_t max_seq_len) : model_(model), max_seq_len_(max_seq_len) {}
  const Tensor& Param(const std::string& name) const;
  Result<Tensor> Linear(const Tensor& x, const std::string& weight, const std::string& bias);
  Status Layer(int l, const Tensor& positions, int64_t t, Tensor& x);

  MoeModel& model_;
  int64_t max_seq_len_;
  int64_t length_ = 0;
  std::vector<Tensor> k_cache_, v_cache_;  // per layer [max_seq_len, kv_heads * head_dim]
  Tensor stats_;                           // f32 [2], MoeLayer's aux/z (ignored)
};

}  // namespace sy
