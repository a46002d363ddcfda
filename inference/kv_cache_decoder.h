// KvCacheDecoder: prefill and decode of one sequence over a loaded (forward-only) MoeModel, with a
// KV cache, so each new token costs one token's compute instead of the whole sequence's.
//
//   SY_ASSIGN_OR_RETURN(auto dec, KvCacheDecoder::Create(model, max_seq_len, 1, &provider));
//   SY_ASSIGN_OR_RETURN(auto logits, dec->Append(prompt));      // prefill: [T, vocab]
//   SY_ASSIGN_OR_RETURN(logits, dec->Append({next_token}));      // decode:  [1, vocab]
//   With batch B: Prefill(b, prompt_b) for each sequence, then Decode({t_0, ..., t_B-1}) steps
//   every sequence at once (one [B, H] pass through each layer, each with its own length).
//
// The layer math is MoeModel's (runtime/model/decoder_layer.h) on the model's own parameter
// tensors; the MoE FFN runs through the model's MoeLayer, whose experts the ExpertProvider
// (inference/expert_provider.h) computes: each step is bracketed by the provider's BeginStep and
// EndStep. Pre-gated models (ModelConfig::pregate) route MoE layer m >= 1 by MoE layer m - 1's
// pre-gate logits, as MoeModel::Forward does. The cache holds, per layer, the keys after q/k norm
// and RoPE and the values, f32 [batch, max_seq_len, kv_heads * head_dim] on the backend.
//
// Ownership: borrows the model and the provider (both must outlive the decoder) and owns the
// cache. Thread-safety: one thread at a time, the thread that drives the backend's compute
// stream.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "inference/expert_provider.h"
#include "runtime/core/status.h"
#include "runtime/model/moe_model.h"

namespace sy {

class KvCacheDecoder {
 public:
  // `batch` sequences of up to `max_seq_len` tokens each. `provider` computes the experts; Create
  // installs it on `model` when it is not installed yet (FailedPrecondition when it is installed
  // on another model). Null: the experts the model holds, with no step hooks (a provider
  // installed on the model earlier still runs them). ResourceExhausted when the cache does not
  // fit.
  static Result<std::unique_ptr<KvCacheDecoder>> Create(MoeModel& model, int64_t max_seq_len,
                                                        int batch = 1,
                                                        ExpertProvider* provider = nullptr);

  // Runs `tokens` of sequence `seq` at positions length(seq) .. length(seq) + T - 1 (a prompt's
  // prefill, or any continuation) and returns their logits, f32 row-major [T, vocab] in host
  // memory. InvalidArgument when the cache would overflow or an id is out of range.
  Result<std::vector<float>> Prefill(int seq, std::span<const int32_t> tokens);
  // One decode step of every sequence at once: tokens[b] goes to sequence b at its own position.
  // Returns f32 [batch, vocab]. Sequences may have different lengths.
  Result<std::vector<float>> Decode(std::span<const int32_t> tokens);
  // Prefill(0, tokens): the single-sequence form.
  Result<std::vector<float>> Append(std::span<const int32_t> tokens) { return Prefill(0, tokens); }

  // Makes sequence `dst` a copy of sequence `src` (its cached keys and values, device to device,
  // and its length), so a beam can fork from another without recomputing their common prefix.
  // Ordered on the compute stream. dst == src is a no-op.
  void CopySequence(int dst, int src);

  int batch() const { return static_cast<int>(lengths_.size()); }
  int64_t length(int seq = 0) const { return lengths_.at(static_cast<size_t>(seq)); }
  int64_t capacity() const { return max_seq_len_; }
  // Forgets every sequence (the cache is reused).
  void Reset() { lengths_.assign(lengths_.size(), 0); }

 private:
  // One forward over N = attention rows x tokens_per_row tokens; attention row i belongs to
  // sequence seqs[i] and starts at position starts[i].
  struct Step {
    int64_t tokens_per_row = 0;
    bool prefill = false;
    std::vector<int> seqs;
    std::vector<int64_t> starts;
  };

  KvCacheDecoder(MoeModel& model, ExpertProvider* provider, int64_t max_seq_len, int batch)
      : model_(model),
        provider_(provider),
        max_seq_len_(max_seq_len),
        lengths_(static_cast<size_t>(batch), 0) {}
  const Tensor& Param(const std::string& name) const;
  Result<Tensor> Linear(const Tensor& x, const std::string& weight, const std::string& bias);
  // routed: in, the previous MoE layer's pre-gate logits (pre-gated models); out, this layer's.
  Status Layer(int l, const Step& step, const Tensor& positions, Tensor& x, Tensor& routed);
  Status Layers(const Step& step, const Tensor& positions, Tensor& x);
  Result<std::vector<float>> Run(const Step& step, const std::vector<int32_t>& ids);

  MoeModel& model_;
  ExpertProvider* provider_;  // null: the model's own expert computation
  int64_t max_seq_len_;
  std::vector<int64_t> lengths_;           // per sequence
  std::vector<Tensor> k_cache_, v_cache_;  // per layer [batch * max_seq_len, kv_heads * head_dim]
  Tensor stats_;                           // f32 [2], MoeLayer's aux/z (ignored)
};

}  // namespace sy
