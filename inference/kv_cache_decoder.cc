#include "inference/kv_cache_decoder.h"

#include <string>
#include <utility>

#include "runtime/core/check.h"
#include "runtime/model/host_transfer.h"

namespace sy {

KvCacheDecoder::KvCacheDecoder(MoeModel& model, ExpertProvider* provider,
                               std::unique_ptr<KvCache> cache)
    : model_(model), provider_(provider), cache_(std::move(cache)), workspace_(model.backend()) {}

Result<std::unique_ptr<KvCacheDecoder>> KvCacheDecoder::Create(MoeModel& model, int64_t max_seq_len,
                                                               int batch,
                                                               ExpertProvider* provider) {
  return CreateWithSharedPrefix(model, 0, max_seq_len, batch, provider);
}

Result<std::unique_ptr<KvCacheDecoder>> KvCacheDecoder::CreateWithSharedPrefix(
    MoeModel& model, int64_t prefix_capacity, int64_t max_seq_len, int batch,
    ExpertProvider* provider) {
  if (provider != nullptr && provider->model() == nullptr) {
    SY_RETURN_IF_ERROR(provider->Install(model));
  }
  if (provider != nullptr && provider->model() != &model) {
    return FailedPreconditionError("KvCacheDecoder: expert provider '" + provider->name() +
                                   "' is installed on another model");
  }
  SY_ASSIGN_OR_RETURN(
      std::unique_ptr<KvCache> cache,
      KvCache::Create(model.backend(), model.config(), batch, max_seq_len, prefix_capacity));
  return std::unique_ptr<KvCacheDecoder>(new KvCacheDecoder(model, provider, std::move(cache)));
}

Result<std::vector<float>> KvCacheDecoder::Prefill(int seq, std::span<const int32_t> tokens) {
  if (seq < 0 || seq >= batch()) {
    return InvalidArgumentError("KvCacheDecoder::Prefill: sequence " + std::to_string(seq) +
                                " outside [0, " + std::to_string(batch()) + ")");
  }
  if (tokens.empty()) return InvalidArgumentError("KvCacheDecoder::Prefill: no tokens");
  step_.tokens_per_row = static_cast<int64_t>(tokens.size());
  step_.shared = false;
  step_.seqs.assign(1, seq);
  step_.starts.assign(1, cache_->own_length(seq));
  return Run(step_, tokens, /*prefill=*/true);
}

Result<std::vector<float>> KvCacheDecoder::PrefillShared(std::span<const int32_t> tokens) {
  if (tokens.empty()) return InvalidArgumentError("KvCacheDecoder::PrefillShared: no tokens");
  step_.tokens_per_row = static_cast<int64_t>(tokens.size());
  step_.shared = true;
  step_.seqs.assign(1, -1);
  step_.starts.assign(1, cache_->prefix_length());
  return Run(step_, tokens, /*prefill=*/true);
}

Result<std::vector<float>> KvCacheDecoder::Decode(std::span<const int32_t> tokens) {
  if (static_cast<int>(tokens.size()) != batch()) {
    return InvalidArgumentError("KvCacheDecoder::Decode: " + std::to_string(tokens.size()) +
                                " tokens for " + std::to_string(batch()) + " sequences");
  }
  step_.tokens_per_row = 1;
  step_.shared = false;
  step_.seqs.clear();
  step_.starts.clear();
  for (int b = 0; b < batch(); ++b) {
    step_.seqs.push_back(b);
    step_.starts.push_back(cache_->own_length(b));
  }
  return Run(step_, tokens, /*prefill=*/false);
}

Result<std::vector<float>> KvCacheDecoder::DecodeSequences(std::span<const int> seqs,
                                                           std::span<const int32_t> tokens) {
  if (seqs.empty() || seqs.size() != tokens.size()) {
    return InvalidArgumentError(
        "KvCacheDecoder::DecodeSequences: " + std::to_string(tokens.size()) + " tokens for " +
        std::to_string(seqs.size()) + " sequences (at least one)");
  }
  step_.tokens_per_row = 1;
  step_.shared = false;
  step_.seqs.assign(seqs.begin(), seqs.end());
  step_.starts.clear();
  std::vector<bool> seen(static_cast<size_t>(batch()), false);
  for (const int seq : seqs) {
    if (seq < 0 || seq >= batch() || seen[static_cast<size_t>(seq)]) {
      return InvalidArgumentError("KvCacheDecoder::DecodeSequences: sequence " +
                                  std::to_string(seq) + " is out of [0, " +
                                  std::to_string(batch()) + ") or given twice");
    }
    seen[static_cast<size_t>(seq)] = true;
    step_.starts.push_back(cache_->own_length(seq));
  }
  return Run(step_, tokens, /*prefill=*/false);
}

Result<std::vector<float>> KvCacheDecoder::Run(const KvStep& step, std::span<const int32_t> ids,
                                               bool prefill) {
  const ModelConfig& c = model_.config();
  for (const int32_t id : ids) {
    if (id < 0 || id >= c.vocab_size) {
      return InvalidArgumentError("token id " + std::to_string(id) + " outside [0, vocab_size = " +
                                  std::to_string(c.vocab_size) + ")");
    }
  }
  SY_CHECK_EQ(static_cast<int64_t>(ids.size()), step.num_tokens()) << "KvCacheDecoder step";
  // Grows the workspace here, between steps, when the previous step did not fit it.
  SY_RETURN_IF_ERROR(workspace_.Reset());
  std::vector<float> out(ids.size() * static_cast<size_t>(c.vocab_size));
  Status status = Status::Ok();
  {
    WorkspaceBinding bind(model_.backend(), workspace_);
    status = RunBound(step, ids, prefill, out);
  }
  SY_RETURN_IF_ERROR(status);
  cache_->Commit();
  return out;
}

Status KvCacheDecoder::RunBound(const KvStep& step, std::span<const int32_t> ids, bool prefill,
                                std::vector<float>& out) {
  Backend& backend = model_.backend();
  const int64_t t = step.num_tokens();
  SY_RETURN_IF_ERROR(cache_->Begin(step));
  SY_ASSIGN_OR_RETURN(Tensor ids_dev, UploadI32(backend, ids, Shape{t}));
  TokenBatch batch;
  batch.batch = static_cast<int64_t>(step.seqs.size());
  batch.seq_len = step.tokens_per_row;
  batch.kv_cache = cache_.get();
  SY_ASSIGN_OR_RETURN(batch.positions, UploadI32(backend, cache_->positions(), Shape{t}));
  SY_ASSIGN_OR_RETURN(Tensor logits,
                      backend.Allocate(DType::kF32, Shape{t, model_.config().vocab_size}));
  if (provider_ != nullptr) {
    SY_RETURN_IF_ERROR(
        provider_->BeginStep(backend, ExpertStep{.num_tokens = t, .prefill = prefill}));
  }
  Status status = model_.ForwardCached(ids_dev, batch, logits);
  // The provider sees the end of every step it saw begin, failed ones included.
  if (provider_ != nullptr) {
    const Status ended = provider_->EndStep(backend);
    if (status.ok()) status = ended;
  }
  SY_RETURN_IF_ERROR(status);
  backend.CopyAsync(logits, Tensor::Wrap(out.data(), DType::kF32, logits.shape()),
                    backend.compute_stream());
  backend.SynchronizeStream(backend.compute_stream());
  return Status::Ok();
}

}  // namespace sy
