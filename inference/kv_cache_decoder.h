// KvCacheDecoder: prefill and decode of sequences over a loaded (forward-only) MoeModel, with a
// KV cache, so each new token costs one token's compute instead of the whole sequence's.
//
//   SY_ASSIGN_OR_RETURN(auto dec, KvCacheDecoder::Create(model, max_seq_len, 1, &provider));
//   SY_ASSIGN_OR_RETURN(auto logits, dec->Append(prompt));      // prefill: [T, vocab]
//   SY_ASSIGN_OR_RETURN(logits, dec->Append({next_token}));      // decode:  [1, vocab]
//   With batch B: Prefill(b, prompt_b) for each sequence, then Decode({t_0, ..., t_B-1}) steps
//   every sequence at once (one [B, H] pass through each layer, each with its own length), or
//   DecodeSequences(seqs, tokens) steps only some of them.
//
// The math is the model's own: each step is one MoeModel::ForwardCached (runtime/model/
// moe_model.h), the incremental mode of the model's decoder layers, over a KvCache
// (runtime/model/kv_cache.h, which also explains the shared prefix). The MoE FFN computes its
// experts through the ExpertProvider (inference/expert_provider.h): each step is bracketed by the
// provider's BeginStep and EndStep.
//
// Memory. Every activation and scratch tensor of a step, device and host staging alike, comes from
// the decoder's Workspace (runtime/backend/workspace.h), bound for the step and rewound after each
// layer. The workspace is sized by use: the first step of a larger shape (the first decode step of
// a batch, a longer prefill) grows it once, and from then on a step makes no allocator call at
// all (workspace() reports its capacity and overflows).
//
// Ownership: borrows the model and the provider (both must outlive the decoder) and owns the cache
// and the workspace. Thread-safety: one thread at a time, the thread that drives the backend's
// compute stream.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "inference/expert_provider.h"
#include "runtime/backend/workspace.h"
#include "runtime/core/status.h"
#include "runtime/model/kv_cache.h"
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
  // As Create, plus a shared prefix of up to `prefix_capacity` tokens (KvCache's Note [shared
  // prefix]); each sequence holds up to `max_seq_len` tokens of its own after it.
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
  // One decode step of the sequences `seqs` (distinct, any order): tokens[i] goes to sequence
  // seqs[i]. Returns f32 [seqs.size(), vocab], row i for seqs[i]. The other sequences keep their
  // caches untouched (continuous batching: sequences join and leave between steps).
  Result<std::vector<float>> DecodeSequences(std::span<const int> seqs,
                                             std::span<const int32_t> tokens);
  // Prefill(0, tokens): the single-sequence form.
  Result<std::vector<float>> Append(std::span<const int32_t> tokens) { return Prefill(0, tokens); }

  // Makes sequence `dst` a copy of sequence `src` (its own cached keys and values, device to
  // device, and its length; the shared prefix is not copied, both keep reading it), so a beam can
  // fork from another without recomputing their common prefix. Ordered on the compute stream.
  // dst == src is a no-op.
  void CopySequence(int dst, int src) { cache_->CopySequence(dst, src); }
  // Forgets sequence `seq`'s own tokens, so a new sequence can take its slot.
  void ResetSequence(int seq) { cache_->ResetSequence(seq); }

  int batch() const { return cache_->batch(); }
  // Tokens of sequence `seq`, the shared prefix included.
  int64_t length(int seq = 0) const { return cache_->length(seq); }
  int64_t prefix_length() const { return cache_->prefix_length(); }
  // The most tokens a sequence can hold, the shared prefix included.
  int64_t capacity() const { return cache_->prefix_capacity() + cache_->max_seq_len(); }
  // Forgets every sequence and the shared prefix (the cache is reused).
  void Reset() { cache_->Reset(); }

  MoeModel& model() { return model_; }
  ExpertProvider* provider() { return provider_; }
  const KvCache& cache() const { return *cache_; }
  const Workspace& workspace() const { return workspace_; }

 private:
  KvCacheDecoder(MoeModel& model, ExpertProvider* provider, std::unique_ptr<KvCache> cache);
  // One forward step over `ids` (step.num_tokens() of them, row-major); `prefill` is what the
  // provider's ExpertStep says.
  Result<std::vector<float>> Run(const KvStep& step, std::span<const int32_t> ids, bool prefill);
  Status RunBound(const KvStep& step, std::span<const int32_t> ids, bool prefill,
                  std::vector<float>& out);

  MoeModel& model_;
  ExpertProvider* provider_;  // null: the model's own expert computation
  std::unique_ptr<KvCache> cache_;
  Workspace workspace_;
  KvStep step_;  // reused by every step
};

}  // namespace sy
