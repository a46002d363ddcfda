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
// Note [shared prefix]. A decoder made by CreateWithSharedPrefix keeps one prefix (PrefillShared:
// a prompt every sequence starts with, such as beam search's) stored once, and after it each
// sequence's own tokens in its own cache. A step over own tokens is cascade attention: the queries
// of all the step's tokens, folded into the head dimension in GQA order ([Hkv, tokens, Hq/Hkv]),
// attend the prefix in one Attention call (T = 1, every query sees the whole prefix), each
// sequence's queries attend its own tokens causally in a second call, and the two partial results
// merge by their log-sum-exps: out = w_p * out_p + w_o * out_o with (w_p, w_o) = softmax(lse_p,
// lse_o) (Backend::Softmax over the pairs, then one weighted ScatterAddRows; the permutations are
// GatherRows with index tables made once per step). CopySequence then copies only the own part.
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
  // As Create, plus a shared prefix of up to `prefix_capacity` tokens (Note [shared prefix]); each
  // sequence holds up to `max_seq_len` tokens of its own after it.
  static Result<std::unique_ptr<KvCacheDecoder>> CreateWithSharedPrefix(
      MoeModel& model, int64_t prefix_capacity, int64_t max_seq_len, int batch,
      ExpertProvider* provider = nullptr);

  // Appends `tokens` to the shared prefix that every sequence starts with and returns their
  // logits, f32 [T, vocab] in host memory. FailedPrecondition when a sequence has tokens of its
  // own already; InvalidArgument past prefix_capacity or for an id out of range.
  Result<std::vector<float>> PrefillShared(std::span<const int32_t> tokens);

  // Runs `tokens` of sequence `seq` at positions length(seq) .. length(seq) + T - 1 (a prompt's
  // prefill, or any continuation) and returns their logits, f32 row-major [T, vocab] in host
  // memory. InvalidArgument when the cache would overflow or an id is out of range.
  Result<std::vector<float>> Prefill(int seq, std::span<const int32_t> tokens);
  // One decode step of every sequence at once: tokens[b] goes to sequence b at its own position.
  // Returns f32 [batch, vocab]. Sequences may have different lengths.
  Result<std::vector<float>> Decode(std::span<const int32_t> tokens);
  // Prefill(0, tokens): the single-sequence form.
  Result<std::vector<float>> Append(std::span<const int32_t> tokens) { return Prefill(0, tokens); }

  // Makes sequence `dst` a copy of sequence `src` (its own cached keys and values, device to
  // device, and its length; the shared prefix is not copied, both keep reading it), so a beam can
  // fork from another without recomputing their common prefix. Ordered on the compute stream.
  // dst == src is a no-op.
  void CopySequence(int dst, int src);

  int batch() const { return static_cast<int>(lengths_.size()); }
  // Tokens of sequence `seq`, the shared prefix included.
  int64_t length(int seq = 0) const { return prefix_len_ + lengths_.at(static_cast<size_t>(seq)); }
  int64_t prefix_length() const { return prefix_len_; }
  // The most tokens a sequence can hold, the shared prefix included.
  int64_t capacity() const { return prefix_capacity_ + max_seq_len_; }
  // Forgets every sequence and the shared prefix (the cache is reused).
  void Reset() {
    lengths_.assign(lengths_.size(), 0);
    prefix_len_ = 0;
  }

 private:
  // One forward over N = attention rows x tokens_per_row tokens; attention row i belongs to
  // sequence seqs[i] and starts at row starts[i] of its own cache (or, when `shared`, the one row
  // extends the shared prefix from row starts[0]).
  struct Step {
    int64_t tokens_per_row = 0;
    bool prefill = false;
    bool shared = false;
    std::vector<int> seqs;
    std::vector<int64_t> starts;
    // Cascade attention's index tables (own tokens after a shared prefix), i32 on the backend.
    Tensor fold, pair, weight_of, scatter;
  };

  KvCacheDecoder(MoeModel& model, ExpertProvider* provider, int64_t prefix_capacity,
                 int64_t max_seq_len, int batch)
      : model_(model),
        provider_(provider),
        prefix_capacity_(prefix_capacity),
        max_seq_len_(max_seq_len),
        lengths_(static_cast<size_t>(batch), 0) {}
  const Tensor& Param(const std::string& name) const;
  Result<Tensor> Linear(const Tensor& x, const std::string& weight, const std::string& bias);
  // routed: in, the previous MoE layer's pre-gate logits (pre-gated models); out, this layer's.
  Status Layer(int l, const Step& step, const Tensor& positions, Tensor& x, Tensor& routed);
  // Writes the step's keys and values to the cache and returns the attention output [N, Hq * D].
  Result<Tensor> Attend(int l, const Step& step, const Tensor& q_rot, const Tensor& k_rot,
                        const Tensor& v);
  // Merges the prefix and own partial attentions (Note [shared prefix]).
  // q [rows, tokens per row, Hq, D]; own: the options of the own-token attention over k_own and
  // v_own [rows, S, Hkv, D].
  Result<Tensor> AttendCascade(int l, const Step& step, const Tensor& q,
                               const AttentionOptions& own, const Tensor& k_own,
                               const Tensor& v_own);
  Status MakeCascadeTables(Step& step) const;
  Status Layers(const Step& step, const Tensor& positions, Tensor& x);
  Result<std::vector<float>> Run(Step& step, const std::vector<int32_t>& ids);

  MoeModel& model_;
  ExpertProvider* provider_;  // null: the model's own expert computation
  int64_t prefix_capacity_;
  int64_t max_seq_len_;
  int64_t prefix_len_ = 0;
  std::vector<int64_t> lengths_;             // per sequence, its own tokens (after the prefix)
  std::vector<Tensor> k_cache_, v_cache_;    // per layer [batch * max_seq_len, kv_heads * head_dim]
  std::vector<Tensor> k_prefix_, v_prefix_;  // per layer [prefix_capacity, kv_heads * head_dim]
  Tensor stats_;                             // f32 [2], MoeLayer's aux/z (ignored)
};

}  // namespace sy
