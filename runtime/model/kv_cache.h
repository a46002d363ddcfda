// KvCache: the keys and values of every decoder layer for `batch` sequences, so that a forward
// step over new tokens attends to everything before them without recomputing it. It is the state
// of the incremental mode of the model's attention (runtime/model/attention_block.h: a TokenBatch
// with kv_cache set attends over the cache instead of over its own tokens).
//
// Layout: per layer, keys (after q/k norm and RoPE) and values, f32 [batch * max_seq_len,
// kv_heads * head_dim] on the backend; sequence s owns rows [s * max_seq_len, (s + 1) *
// max_seq_len). An optional shared prefix of up to prefix_capacity tokens (per layer,
// [prefix_capacity, kv_heads * head_dim]) is stored once and read by every sequence before its
// own tokens.
//
// A step (KvStep) is N = rows x tokens_per_row new tokens: attention row i carries sequence
// seqs[i]'s tokens at positions starts[i] .. starts[i] + tokens_per_row - 1 of its own cache
// (after the shared prefix), or, when `shared`, one row that extends the shared prefix. Use:
//   SY_RETURN_IF_ERROR(cache.Begin(step));    // checks bounds; positions(); cascade tables
//   ... the model's forward, whose attention calls Attend(layer, ...) once per layer ...
//   cache.Commit();                           // the step's tokens now count
// A step that fails before Commit leaves the lengths as they were.
//
// Note [shared prefix]. After a shared prefix, a step over own tokens is cascade attention: the
// queries of all the step's tokens, folded into the head dimension in GQA order ([Hkv, tokens,
// Hq/Hkv]), attend the prefix in one Attention call (T = 1, every query sees the whole prefix),
// each sequence's queries attend its own tokens causally in a second call, and the two partial
// results merge by their log-sum-exps: out = w_p * out_p + w_o * out_o with (w_p, w_o) =
// softmax(lse_p, lse_o) (Backend::Softmax over the pairs, then one weighted ScatterAddRows; the
// permutations are GatherRows with index tables made once per step by Begin). CopySequence
// copies only the own part.
//
// Ownership: owns the cache tensors; borrows the backend, which must outlive it. Scratch and the
// step's index tables come from Backend::Allocate (a bound workspace during a decode step).
// Thread-safety: one thread at a time, the thread that drives the backend's compute stream.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/model/model_config.h"

namespace sy {

struct KvStep {
  int64_t tokens_per_row = 0;
  bool shared = false;          // extends the shared prefix (one row, seqs = {-1})
  std::vector<int> seqs;        // the sequence of each attention row
  std::vector<int64_t> starts;  // each row's first position in its sequence's own tokens
  int64_t num_tokens() const { return static_cast<int64_t>(seqs.size()) * tokens_per_row; }
};

class KvCache {
 public:
  // InvalidArgument for batch < 1, max_seq_len < 1 or prefix_capacity < 0; ResourceExhausted
  // when the cache does not fit the device.
  static Result<std::unique_ptr<KvCache>> Create(Backend& backend, const ModelConfig& config,
                                                 int batch, int64_t max_seq_len,
                                                 int64_t prefix_capacity = 0);

  // Starts `step`: InvalidArgument when a row would run past its cache (naming the sequence and
  // the capacity) or a sequence is out of range; FailedPrecondition when a shared-prefix step
  // comes after a sequence has tokens of its own. Fills positions() and, after a shared prefix,
  // uploads the cascade tables.
  Status Begin(const KvStep& step);
  // The position of each of the step's tokens (row-major: row, then token), host memory.
  const std::vector<int32_t>& positions() const { return positions_; }
  // Layer `layer` of the current step: writes k_rot and v [N, Hkv * D] into the cache and the
  // attention of q_rot [N, Hq * D] over the cache (causal, GQA) into out [N, Hq * D].
  Status Attend(Backend& backend, int layer, const Tensor& q_rot, const Tensor& k_rot,
                const Tensor& v, const Tensor& out);
  // The current step's tokens join their sequences (or the shared prefix).
  void Commit();

  // Makes sequence `dst` a copy of sequence `src` (its own keys and values, device to device, and
  // its length; the shared prefix stays shared). Ordered on the compute stream. dst == src: no-op.
  void CopySequence(int dst, int src);
  // Forgets every sequence and the shared prefix (the memory is kept).
  void Reset();
  // Forgets sequence `seq`'s own tokens (a slot taken over by a new sequence).
  void ResetSequence(int seq);

  int batch() const { return static_cast<int>(lengths_.size()); }
  // Tokens of sequence `seq`, the shared prefix included.
  int64_t length(int seq) const { return prefix_len_ + lengths_.at(static_cast<size_t>(seq)); }
  int64_t own_length(int seq) const { return lengths_.at(static_cast<size_t>(seq)); }
  int64_t prefix_length() const { return prefix_len_; }
  int64_t prefix_capacity() const { return prefix_capacity_; }
  int64_t max_seq_len() const { return max_seq_len_; }
  // Bytes of keys and values held on the device.
  size_t bytes() const;
  // Device bytes one token of one sequence takes in the cache of a model with `config` (f32 keys
  // and values of every layer): what a KV-cache budget divides by.
  static int64_t BytesPerToken(const ModelConfig& config);

 private:
  KvCache(Backend& backend, const ModelConfig& config, int batch, int64_t max_seq_len,
          int64_t prefix_capacity);
  Status MakeCascadeTables();
  // After a shared prefix: the attention of every query over the prefix, merged with the own
  // attention already in `parts` / `lses` (Note [shared prefix]) into out.
  Status AttendPrefixAndMerge(Backend& backend, int layer, const Tensor& q_rot, const Tensor& parts,
                              const Tensor& lses, const Tensor& out);

  Backend& backend_;
  int64_t kv_out_ = 0;
  int64_t head_dim_ = 0;
  int num_heads_ = 0;
  int num_kv_heads_ = 0;
  int64_t max_seq_len_;
  int64_t prefix_capacity_;
  int64_t prefix_len_ = 0;
  std::vector<int64_t> lengths_;             // per sequence, its own tokens (after the prefix)
  std::vector<Tensor> k_cache_, v_cache_;    // per layer [batch * max_seq_len, kv_out]
  std::vector<Tensor> k_prefix_, v_prefix_;  // per layer [prefix_capacity, kv_out]

  // The current step.
  KvStep step_;
  bool in_step_ = false;
  std::vector<int32_t> positions_;
  std::vector<int32_t> kv_lens_;  // per row: own tokens it attends to after the step
  AttentionOptions attention_;    // reused by every Attention call (no allocation per step)
  // Cascade attention's index tables, i32 on the backend, and their host staging.
  Tensor fold_, pair_, weight_of_, scatter_;
  std::vector<int32_t> fold_host_, pair_host_, weight_of_host_, scatter_host_;
};

}  // namespace sy
